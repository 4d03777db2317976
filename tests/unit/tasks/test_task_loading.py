"""Loading KernelBench-format files and the built-in suite; errors name the file and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from musaenv.errors import TaskLoadError
from musaenv.tasks.builtin import builtin_tasks, get_task, solution_source
from musaenv.tasks.task import Task, load_task_dir, load_task_file, size_globals

REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

batch_size = 16
dim = 64  # width

def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.float16)]

def get_init_inputs():
    return []
"""


def test_load_file_infers_level_and_dtype(tmp_path: Path):
    f = tmp_path / "level2" / "double.py"
    f.parent.mkdir()
    f.write_text(REF)
    t = load_task_file(f)
    assert (t.level, t.dtype, t.atol) == (2, "float16", 1e-2)
    assert get_task(str(f)).source == REF


def test_directory_loader_uses_relative_ids(tmp_path: Path):
    for level in ("level1", "level3"):
        (tmp_path / level).mkdir()
        (tmp_path / level / "a.py").write_text(REF)
    assert [t.id for t in load_task_dir(tmp_path)] == ["level1/a", "level3/a"]
    assert [t.level for t in load_task_dir(tmp_path)] == [1, 3]


@pytest.mark.parametrize(
    ("content", "reason"),
    [("def f(:\n", "not valid Python"), ("class Model: pass\n", "get_inputs"), (None, "cannot read")],
)
def test_bad_files_name_file_and_reason(tmp_path: Path, content, reason):
    f = tmp_path / "bad.py"
    if content is not None:
        f.write_text(content)
    with pytest.raises(TaskLoadError) as e:
        load_task_file(f)
    assert str(f) in str(e.value) and reason in str(e.value)


def test_unknown_task_id_lists_examples():
    with pytest.raises(TaskLoadError, match="not a built-in task id"):
        get_task("l9_nothing")


def test_render_source_substitutes_size_constants():
    t = Task(id="x", level=1, source=REF)
    out = t.render_source({"dim": 7})
    assert "dim = 7  # width" in out and "batch_size = 16" in out
    assert size_globals(out) == {"batch_size": 16, "dim": 7}


def test_builtin_suite_has_tiers_and_solutions():
    tasks = builtin_tasks()
    assert len(tasks) >= 40 and {t.level for t in tasks} == {1, 2, 3}
    relu = get_task("l1_relu")
    assert len(relu.shapes_for("cpu")) >= 2 and relu.shapes_for("cpu") != relu.shapes_for("gpu")
    assert "class ModelNew" in solution_source("l1_relu")
