"""The built-in task suite: manifest, reference programs at their CPU-tier shapes, and shipped CPU solutions.

Nothing here compiles C++; the solutions are checked statically (the slow end-to-end check of a solution
belongs with the evaluator's tests).
"""

from __future__ import annotations

import ast
import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from musaenv.tasks.builtin import SUITE_DIR, builtin_tasks, solution_path, solution_source, solved_task_ids
from musaenv.tasks.task import Shape, Task, size_globals

torch = pytest.importorskip("torch")

TASKS = builtin_tasks()
SOLVED = solved_task_ids("cpu")

# torch:: names a C++ reference solution may use: allocation, types and checks, never compute.
ALLOWED_TORCH_NAMES = {"Tensor", "empty", "empty_like", "zeros", "kFloat32"}


def _load_reference(task: Task, shape: Shape) -> types.ModuleType:
    """Execute the source the policy is shown for ``shape`` as a fresh module."""
    module = types.ModuleType(f"ref_{task.id}")
    exec(compile(task.render_source(shape), task.path or task.id, "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_suite_spans_three_levels_with_enough_tasks() -> None:
    assert len(TASKS) >= 40
    per_level = {level: len(builtin_tasks(level)) for level in (1, 2, 3)}
    assert per_level[1] >= 20 and per_level[2] >= 10 and per_level[3] >= 6, per_level
    assert sum(per_level.values()) == len(TASKS)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_task_metadata(task: Task) -> None:
    assert task.id.startswith(f"l{task.level}_")
    assert task.path is not None and Path(task.path).is_file()
    assert Path(task.path).parent.name == f"level{task.level}"
    assert task.dtype == "float32" and (task.atol, task.rtol) == (1e-4, 1e-4)
    assert task.name and task.description
    assert set(task.shapes) == {"cpu", "gpu"}


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_shapes_override_only_file_constants(task: Task) -> None:
    constants = size_globals(task.source)
    for tier in ("cpu", "gpu"):
        shapes = task.shapes[tier]
        assert len(shapes) == 2, f"{tier}: a timing shape and an odd second shape"
        assert shapes[0] != shapes[1]
        for shape in shapes:
            assert shape and set(shape) <= set(constants), set(shape) - set(constants)
            for name, value in shape.items():
                assert type(value) is type(constants[name]), name
                assert not isinstance(value, int) or value > 0
            assert {k: v for k, v in size_globals(task.render_source(shape)).items() if k in shape} == shape
    # A KernelBench user running the file as-is gets the GPU tier's timing shape.
    gpu0 = task.shapes["gpu"][0]
    assert {k: constants[k] for k in gpu0} == gpu0


def test_second_cpu_shape_is_not_block_aligned() -> None:
    # Defeats kernels that hard-code sizes or assume multiples of a block (HACKS.md S16).
    for task in TASKS:
        odd = [v for v in task.shapes["cpu"][1].values() if isinstance(v, int) and v > 16 and v % 8]
        assert odd, task.id


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_reference_runs_on_cpu_shapes(task: Task) -> None:
    outputs = []
    for shape in task.shapes["cpu"]:
        ref = _load_reference(task, shape)
        torch.manual_seed(0)
        model = ref.Model(*ref.get_init_inputs())
        inputs = ref.get_inputs()
        assert all(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in inputs)
        with torch.no_grad():
            out = model(*inputs)
        assert isinstance(out, torch.Tensor)
        assert out.dtype in (torch.float32, torch.int64)
        assert torch.isfinite(out.float()).all()
        # A constant-zero output must not pass the tolerance (HACKS.md S6).
        assert out.float().abs().max() > 10 * task.atol
        outputs.append(out)
    assert outputs[0].shape != outputs[1].shape


def test_enough_solutions_across_levels() -> None:
    assert len(SOLVED) >= 15
    levels = {int(tid[1]) for tid in SOLVED}
    assert levels == {1, 2, 3}
    files = sorted(p.stem for p in (SUITE_DIR.parent / "solutions" / "cpu").glob("*.py"))
    assert files == sorted(SOLVED), "every solution file is named after a task id"


def _init_params(tree: ast.Module, cls: str) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return [a.arg for a in item.args.args[1:]]
    raise AssertionError(f"no {cls}.__init__")


@pytest.mark.parametrize("task_id", SOLVED)
def test_solution_is_a_wellformed_candidate(task_id: str) -> None:
    source = solution_source(task_id, "cpu")
    tree = ast.parse(source, filename=str(solution_path(task_id, "cpu")))
    reference = ast.parse(next(t for t in TASKS if t.id == task_id).source)
    assert _init_params(tree, "ModelNew") == _init_params(reference, "Model")
    assert "load_inline(" in source and '"-O3"' in source
    names = re.findall(r'name="([^"]+)"', source)
    assert names == [f"musaenv_ref_{task_id}"], "one extension per solution, with a distinct name"
    used = set(re.findall(r"torch::(\w+)", source))
    assert used <= ALLOWED_TORCH_NAMES, used - ALLOWED_TORCH_NAMES
    assert "at::" not in source
