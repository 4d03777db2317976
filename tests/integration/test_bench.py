"""``musaenv bench`` end to end on real candidates: shipped solutions, broken, wrong, cheating and crashing ones.

Verdicts, pass@k against a direct computation, fast_p against the rows' own speedups, an interrupted run (a line
cut off mid-write; a real Ctrl-C) resumed without evaluating a sample twice, a KernelBench generations folder with
a reference file of our own, and the same on Ray.
The C++ candidates share their sources with tests/integration/hazards.py, so the build cache serves them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from musaenv.cli import main
from musaenv.tasks.builtin import solution_source
from tests.integration.hazards import COMPILE_ERROR_CANDIDATE, hazard_candidate

KB_MINI = Path(__file__).resolve().parents[1] / "data" / "kernelbench_mini"
FAST = ["--backend", "cpu", "--workers", "2", "--trials", "3", "--no-plots", "--quiet"]


def _fence(code: str) -> str:
    return f"Here is my kernel:\n```python\n{code}\n```\n"


def _generations(path: Path) -> dict[tuple[str, int], str]:
    """Two built-in tasks, the verdicts each sample must get, written as a JSONL; returns the expected verdicts."""
    relu, add = solution_source("l1_relu"), solution_source("l1_add")
    cheat = relu.replace("return ext.relu_forward(x)", "return torch.relu(x)")  # the reference's op, no kernel
    rows = [
        ("l1_relu", _fence(relu), "correct"),
        ("l1_relu", COMPILE_ERROR_CANDIDATE, "compile_error"),
        ("l1_relu", hazard_candidate("relu_wrong"), "incorrect"),
        ("l1_relu", _fence(cheat), "cheating"),
        ("l1_relu", _fence(relu), "correct"),  # identical to sample 0: evaluated once
        ("l1_add", _fence(add), "correct"),
        ("l1_add", "Sorry, I cannot write this kernel.", "format_error"),
        ("l1_add", hazard_candidate("segfault"), "runtime_error"),  # a crashing worker costs this sample only
    ]
    expected, lines = {}, []
    for task, response, verdict in rows:
        sample = sum(1 for t, _ in expected if t == task)
        expected[(task, sample)] = verdict
        lines.append(json.dumps({"task": task, "sample": sample, "response": response, "model": "test"}))
    path.write_text("\n".join(lines) + "\n")
    return expected


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _direct_pass_at_k(counts: list[tuple[int, int]], k: int) -> float:
    """pass@k straight from Chen et al.'s definition, written independently of musaenv.bench.metrics."""
    return sum(1 - math.comb(n - c, k) / math.comb(n, k) for n, c in counts) / len(counts)


def test_bench_without_compiling_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cheat = solution_source("l1_relu").replace("return ext.relu_forward(x)", "return torch.relu(x)")
    gen = tmp_path / "gen.jsonl"
    gen.write_text(
        json.dumps({"task": "l1_relu", "response": "no code"}) + "\n"
        + json.dumps({"task": "l1_relu", "response": _fence(cheat)}) + "\n"
    )  # fmt: skip
    assert main(["bench", str(gen), "--out", str(tmp_path / "out"), *FAST]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["verdicts"] == {"cheating": 1, "format_error": 1} and summary["pass_at_k"] == {"1": 0.0, "2": 0.0}
    assert "| correct rate | 0.0 % |" in capsys.readouterr().out
    assert main(["bench", str(gen), "--out", str(tmp_path / "out"), *FAST]) == 2  # results there, no --resume
    assert main(["bench", str(gen)]) == 2  # no --out
    assert main(["bench", "compare", str(tmp_path / "out")]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["bench", "compare", str(tmp_path / "out"), str(tmp_path / "out")]) == 0
    assert "**Overall**: no difference: the same responses in both runs." in capsys.readouterr().out


@pytest.mark.slow
def test_bench_verdicts_metrics_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gen, out = tmp_path / "gen.jsonl", tmp_path / "run"
    expected = _generations(gen)
    # An interrupted run: three samples, then a line cut off mid-write.
    assert main(["bench", str(gen), "--out", str(out), "--limit", "3", *FAST]) == 0
    first = (out / "results.jsonl").read_text()
    with (out / "results.jsonl").open("a") as f:
        f.write('{"task": "l1_add", "sample": 0, "res')
    capsys.readouterr()
    assert main(["bench", str(gen), "--out", str(out), "--resume", *FAST]) == 0
    assert "8 samples: 3 already in" in capsys.readouterr().out
    rows = _rows(out)
    assert (out / "results.jsonl").read_text().startswith(first)  # earlier rows kept byte for byte
    assert sorted((r["task"], r["sample"]) for r in rows) == sorted(expected)  # each sample once
    got = {(r["task"], r["sample"]): r["result"]["stage"] for r in rows}
    assert got == expected, {k: (got[k], r["result"]["messages"][:2]) for k, r in zip(got, rows)}
    dup = next(r for r in rows if (r["task"], r["sample"]) == ("l1_relu", 4))
    assert dup["duplicate_of"] == 0 and dup["model"] == "test"

    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"] == 2 and summary["samples"] == 8
    counts = [(5, 2), (3, 1)]  # (n, c) of l1_relu and l1_add
    assert summary["pass_at_k"] == pytest.approx({str(k): _direct_pass_at_k(counts, k) for k in (1, 2)})
    assert summary["correct_rate"] == pytest.approx(3 / 8)
    speedups = [r["result"]["speedup"] for r in rows if r["result"]["stage"] == "correct"]
    assert all(s is not None and s > 0 for s in speedups)
    # a threshold counts only when the speedup interval's lower end passes it (paired timing; docs/rewards.md)
    claimed = [
        r["result"].get("speedup_low") or r["result"]["speedup"] for r in rows if r["result"]["stage"] == "correct"
    ]
    for p, value in summary["fast_p"].items():
        assert value == pytest.approx(sum(s > float(p) for s in claimed) / 8)
    assert summary["geomean_speedup"] == pytest.approx(math.exp(sum(map(math.log, speedups)) / 3))
    assert summary["by_level"]["1"]["verdicts"] == summary["verdicts"]

    # Resuming a finished run evaluates nothing and gives the same summary.
    assert main(["bench", str(gen), "--out", str(out), "--resume", *FAST]) == 0
    assert "8 already in" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text()) == summary
    assert _rows(out) == rows


def _plain(response: str) -> str:
    """The program inside a fenced response, as KernelBench's generations folders store it."""
    return response.split("```python\n", 1)[1].rsplit("```", 1)[0]


def _verdict(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a sample's result says, without its task's name or its times."""
    res = row["result"]
    return (row["sample"], row["level"], row["score"], res["stage"], tuple(res["flags"]), res.get("build_tier"),
            res["trials_passed"], res["trials_total"])  # fmt: skip


_MEASURED = {"fast_p", "geomean_speedup", "best_speedup", "median_build_s", "built"}


def _metrics(out: Path) -> Any:
    """summary.json without task names (the folder's ``level1/<stem>``, the JSONL's path) and without what is
    measured rather than judged (speedups, build seconds, builds the second run found in the shared cache)."""

    def judged(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: judged(x) for k, x in v.items() if k not in _MEASURED}
        return v

    summary = judged(json.loads((out / "summary.json").read_text()))
    summary["per_task"] = sorted(json.dumps(v, sort_keys=True) for v in summary["per_task"].values())
    return summary


@pytest.mark.slow
def test_bench_kernelbench_generations_folder(tmp_path: Path) -> None:
    gens = tmp_path / "runs" / "my_model"
    gens.mkdir(parents=True)
    programs = [  # plain programs, as KernelBench stores them; one of each verdict a folder run can give cheaply
        _plain(hazard_candidate("relu_ok")),
        _plain(hazard_candidate("relu_wrong")),
        _plain(COMPILE_ERROR_CANDIDATE),
        "",  # an empty generation (KernelBench writes one when the model's answer had no code)
    ]
    for sample, code in enumerate(programs):
        (gens / f"level_1_problem_1_sample_{sample}_kernel.py").write_text(code)
    (gens / "level_1_problem_1_sample_0_prompt.txt").write_text("ignored")
    out = tmp_path / "out"
    assert main(["bench", str(gens), "--tasks", str(KB_MINI), "--out", str(out), *FAST]) == 0
    rows = sorted(_rows(out), key=lambda r: r["sample"])
    assert [(r["task"], r["level"], r["result"]["stage"]) for r in rows] == [
        ("level1/1_Small_ReLU", 1, "correct"),
        ("level1/1_Small_ReLU", 1, "incorrect"),
        ("level1/1_Small_ReLU", 1, "compile_error"),
        ("level1/1_Small_ReLU", 1, "format_error"),
    ]
    assert rows[0]["file"] == "level_1_problem_1_sample_0_kernel.py"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass_at_k"] == {"1": 0.25, "2": 0.5, "4": 1.0} and summary["by_level"]["1"]["samples"] == 4
    # The same samples as a JSONL naming the problem file (a copy outside the checkout, found by its source, with
    # --tasks): per sample the same verdict, flags, build path, trials, level and score, and the same metrics.
    copy = tmp_path / "problems" / "relu.py"
    copy.parent.mkdir()
    copy.write_text((KB_MINI / "level1" / "1_Small_ReLU.py").read_text())
    jsonl = tmp_path / "same.jsonl"
    lines = [{"task": str(copy), "sample": r["sample"], "response": (gens / r["file"]).read_text()} for r in rows]
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out_jsonl = tmp_path / "out_jsonl"
    assert main(["bench", str(jsonl), "--tasks", str(KB_MINI), "--out", str(out_jsonl), *FAST]) == 0
    again = sorted(_rows(out_jsonl), key=lambda r: r["sample"])
    assert [_verdict(r) for r in again] == [_verdict(r) for r in rows], again
    assert _metrics(out_jsonl) == _metrics(out)


@pytest.mark.slow
@pytest.mark.ray
def test_bench_on_ray(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    gen = tmp_path / "gen.jsonl"
    rows = [{"task": "l1_relu", "response": hazard_candidate(fn)} for fn in ("relu_ok", "segfault")]
    rows.append({"task": "l1_relu", "response": "no code"})
    gen.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024**2)
    try:
        # One execution actor: it holds a CPU, and the prebuild tasks need the other.
        args = ["--ray", "--backend", "cpu", "--workers", "1", "--trials", "3", "--no-plots", "--quiet"]
        assert main(["bench", str(gen), "--out", str(tmp_path / "out"), *args]) == 0
    finally:
        ray.shutdown()
    stages = [r["result"]["stage"] for r in sorted(_rows(tmp_path / "out"), key=lambda r: r["sample"])]
    assert stages == ["correct", "runtime_error", "format_error"]


@pytest.mark.slow
def test_ctrl_c_keeps_finished_rows_and_resume_completes(tmp_path: Path) -> None:
    gen, out = tmp_path / "gen.jsonl", tmp_path / "run"
    fns = ["relu_ok", "relu_wrong", "spin", "spin", "spin"]
    # Distinct texts around one program per function: one build each, no sample a duplicate of another.
    rows = [{"task": "l1_relu", "response": hazard_candidate(fn) + f"\n(attempt {i})"} for i, fn in enumerate(fns)]
    gen.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--backend", "cpu", "--workers", "1", "--trials", "2", "--timeout", "8", "--no-plots", "--quiet"]
    cmd = [sys.executable, "-m", "musaenv.cli", "bench", str(gen), "--out", str(out), *args]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    # A job started in the background by a non-interactive shell (as CI scripts may run) inherits SIGINT as
    # ignored, and Python then never installs its Ctrl-C handler: give the child the default disposition a
    # terminal's foreground job has.
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    results = out / "results.jsonl"
    deadline = time.monotonic() + 600  # a cold cache builds precompiled headers first
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: the parent only, as a terminal would deliver it to the job
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err[-2000:]
    assert "--resume" in err
    first = results.read_text()
    n_first = len(first.splitlines())
    assert 2 <= n_first < len(rows)
    resumed = subprocess.run([*cmd, "--resume"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"{len(rows)} samples: {n_first} already in" in resumed.stdout
    assert results.read_text().startswith(first)
    stages = {r["sample"]: r["result"]["stage"] for r in _rows(out)}
    assert len(_rows(out)) == len(rows)
    # 8 s: the spinning ones time out; the others finish well within it even on a loaded 2-core machine.
    assert stages == {0: "correct", 1: "incorrect", **{i: "timeout" for i in range(2, 5)}}
