"""Reading generations: JSONL rows and KernelBench generations folders, resolved before anything runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from musaenv.bench.inputs import load_generations
from musaenv.errors import MusaEnvError

KB_MINI = Path(__file__).resolve().parents[2] / "data" / "kernelbench_mini"


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_rows_keep_extra_keys_and_number_missing_samples(tmp_path: Path) -> None:
    shutil.copy(KB_MINI / "level1" / "1_Small_ReLU.py", tmp_path / "relu_ref.py")
    f = _jsonl(
        tmp_path / "gen.jsonl",
        [
            {"task": "l1_relu", "response": "a", "model": "m1", "turn": 1},
            {"task": "l1_relu", "response": "b"},
            "",
            {"task": "relu_ref.py", "response": "c", "sample": 7},  # a file next to the JSONL
        ],
    )
    samples = load_generations(f)
    assert [(s.task_key, s.sample, s.response) for s in samples] == [
        ("l1_relu", 0, "a"),
        ("l1_relu", 1, "b"),
        ("relu_ref.py", 7, "c"),
    ]
    assert samples[0].extra == {"model": "m1", "turn": 1}
    assert samples[0].task.id == "l1_relu" and samples[2].task.path == str(tmp_path / "relu_ref.py")
    assert samples[0].digest != samples[1].digest
    assert load_generations(f)[0].digest == samples[0].digest


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"task": "no_such_task", "response": "x"}], "no_such_task"),
        ([{"response": "x"}], '"task" string'),
        (["{not json"], "not JSON"),
        ([{"task": "l1_relu", "sample": 0}, {"task": "l1_relu", "sample": 0}], "sample 0 twice"),
        ([{"task": "l1_relu", "sample": "3"}], "integer"),
    ],
)
def test_bad_jsonl_fails_before_evaluating(tmp_path: Path, rows: list[object], message: str) -> None:
    with pytest.raises(MusaEnvError, match=message):
        load_generations(_jsonl(tmp_path / "gen.jsonl", rows))


def _kb_folder(tmp_path: Path) -> Path:
    gens = tmp_path / "run"
    gens.mkdir()
    for name in ("level_1_problem_1_sample_0_kernel.py", "level_1_problem_1_sample_1_kernel.py",
                 "level_2_problem_7_sample_0_kernel.py"):  # fmt: skip
        (gens / name).write_text(f"# {name}\nclass ModelNew: pass\n")
    (gens / "level_1_problem_1_sample_0_prompt.txt").write_text("not a generation")
    (gens / "eval_results.json").write_text("{}")
    return gens


def test_kernelbench_folder_resolves_problems_to_reference_files(tmp_path: Path) -> None:
    samples = load_generations(_kb_folder(tmp_path), KB_MINI)
    assert [(s.task_key, s.task.level, s.sample) for s in samples] == [
        ("level1/1_Small_ReLU", 1, 0),
        ("level1/1_Small_ReLU", 1, 1),
        ("level2/7_Small_Scale_ReLU", 2, 0),
    ]
    assert samples[1].response.startswith("# level_1_problem_1_sample_1_kernel.py")
    assert samples[2].extra == {"file": "level_2_problem_7_sample_0_kernel.py", "problem": 7}
    # A checkout's root (holding KernelBench/level1 ...) works as well as the folder itself.
    shutil.copytree(KB_MINI, tmp_path / "checkout" / "KernelBench")
    assert [s.task_key for s in load_generations(tmp_path / "run", tmp_path / "checkout")] == [
        s.task_key for s in samples
    ]


def test_kernelbench_folder_errors_name_the_fix(tmp_path: Path) -> None:
    gens = _kb_folder(tmp_path)
    with pytest.raises(MusaEnvError, match="--tasks"):
        load_generations(gens)
    (gens / "level_1_problem_99_sample_0_kernel.py").write_text("x")
    with pytest.raises(MusaEnvError, match="problem 99"):
        load_generations(gens, KB_MINI)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MusaEnvError, match="no files named"):
        load_generations(empty, KB_MINI)
    with pytest.raises(MusaEnvError, match="not found"):
        load_generations(tmp_path / "missing.jsonl")


def test_folder_mode_gives_the_tasks_a_jsonl_of_the_same_files_gives(tmp_path: Path) -> None:
    folder = load_generations(_kb_folder(tmp_path), KB_MINI)
    files = [KB_MINI / "level1" / "1_Small_ReLU.py", KB_MINI / "level1" / "1_Small_ReLU.py",
             KB_MINI / "level2" / "7_Small_Scale_ReLU.py"]  # fmt: skip
    rows = [{"task": str(f), "response": s.response} for f, s in zip(files, folder)]
    jsonl = load_generations(_jsonl(tmp_path / "gen.jsonl", rows))
    for a, b in zip(folder, jsonl):  # derived shapes in both modes (no longer the file's own sizes in one)
        assert (a.task.shapes, a.task.footprint_bytes, a.task.level) == (b.task.shapes, b.task.footprint_bytes,
                                                                         b.task.level)  # fmt: skip
        assert a.task.footprint_bytes


def test_levels_come_from_the_nearest_level_folder_or_the_checkout(tmp_path: Path) -> None:
    nested = tmp_path / "level3_runs" / "KernelBench" / "level2"
    nested.mkdir(parents=True)
    shutil.copy(KB_MINI / "level2" / "7_Small_Scale_ReLU.py", nested / "7.py")
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(KB_MINI / "level2" / "7_Small_Scale_ReLU.py", flat / "scale_relu.py")
    f = _jsonl(tmp_path / "gen.jsonl", [{"task": str(nested / "7.py")}, {"task": str(flat / "scale_relu.py")}])
    assert [s.task.level for s in load_generations(f)] == [2, 1]  # outside any level folder: 1
    assert [s.task.level for s in load_generations(f, KB_MINI)] == [2, 2]  # the checkout's problem: level 2


def test_a_checkout_level_is_found_for_a_problem_whose_sizes_derivation_lifts(tmp_path: Path) -> None:
    # derivation rewrites torch.randn(batch_size, 1024) to read a module-level name (musaenv.tasks.lift): the
    # checkout's file is still found by the text the copy has on disk, not by the task's rewritten source
    checkout = tmp_path / "kb"
    (checkout / "level2").mkdir(parents=True)
    text = (
        (KB_MINI / "level2" / "7_Small_Scale_ReLU.py").read_text().replace("randn(batch_size, dim)", "randn(8, 1024)")
    )
    (checkout / "level2" / "7_Small_Scale_ReLU.py").write_text(text)
    (tmp_path / "scale_relu.py").write_text(text)
    [sample] = load_generations(_jsonl(tmp_path / "gen.jsonl", [{"task": str(tmp_path / "scale_relu.py")}]), checkout)
    assert "dim_1" in sample.task.source and sample.task.level == 2
