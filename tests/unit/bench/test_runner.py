"""The bench runner with an injected evaluator double: duplicates once, resume, one bad sample never the run.

The double answers by the response text (``correct:1.5`` is correct with speedup 1.5), so these tests compile
nothing; tests/integration/test_bench.py runs the same paths on real candidates.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from musaenv.bench.inputs import Sample
from musaenv.bench.report import compare_runs, write_reports
from musaenv.bench.runner import BenchOptions, run_bench
from musaenv.bench.store import ResultStore
from musaenv.errors import MusaEnvError
from musaenv.tasks.builtin import get_task
from musaenv.types import EvalResult, Stage


class Double:
    """Evaluator double with the pool's ``submit``: records calls and how many of one task ran at once."""

    def __init__(self, max_in_flight: int = 3) -> None:
        self.max_in_flight = max_in_flight
        self.backend = SimpleNamespace(name="double")
        self.calls: list[tuple[str, str]] = []
        self.live: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_in_flight)

    def submit(self, task: Any, response: str, seed: int = 0) -> Future[EvalResult]:
        with self._lock:
            self.calls.append((task.id, response))
        return self._threads.submit(self._evaluate, task, response)

    def _evaluate(self, task: Any, response: str) -> EvalResult:
        with self._lock:
            self.live[task.id] += 1
            self.peak[task.id] = max(self.peak[task.id], self.live[task.id])
        try:
            time.sleep(0.02)
            verdict, _, speed = response.partition(":")
            if verdict == "raise":
                raise RuntimeError("the evaluator blew up")
            passed = 5 if verdict == "correct" else 0
            return EvalResult(Stage(verdict), task_id=task.id, speedup=float(speed) if speed else None,
                              trials_passed=passed, trials_total=5)  # fmt: skip
        finally:
            with self._lock:
                self.live[task.id] -= 1

    def close(self) -> None:
        self._threads.shutdown()


def _samples(responses: dict[str, list[str]]) -> list[Sample]:
    return [Sample(t, get_task(t), i, r, {"model": "m"}) for t, rs in responses.items() for i, r in enumerate(rs)]


GENS = {
    "l1_relu": ["correct:1.5", "compile_error", "correct:1.5", "incorrect", "correct:0.5"],
    "l1_add": ["correct:2.5", "raise", "cheating", "format_error"],
}
OPTS = BenchOptions(backend="cpu", progress=False)


def test_identical_responses_are_evaluated_once_and_a_crash_costs_one_sample(tmp_path: Path) -> None:
    ev = Double()
    stats = run_bench(_samples(GENS), tmp_path, OPTS, evaluator=ev)
    assert Counter(ev.calls)[("l1_relu", "correct:1.5")] == 1 and len(ev.calls) == 8
    assert (stats.samples, stats.evaluated, stats.copied, stats.already_done, stats.left) == (9, 8, 1, 0, 0)
    rows = {(r["task"], r["sample"]): r for r in ResultStore(tmp_path).rows()}
    assert len(rows) == 9
    assert rows[("l1_relu", 2)]["duplicate_of"] == 0 and rows[("l1_relu", 2)]["result"]["stage"] == "correct"
    assert rows[("l1_add", 1)]["result"]["stage"] == "infra_error"  # the exception: this sample only
    assert "blew up" in rows[("l1_add", 1)]["result"]["messages"][0] and rows[("l1_add", 1)]["score"] is None
    assert rows[("l1_add", 0)]["model"] == "m" and rows[("l1_add", 0)]["score"] > 1.0
    summary = write_reports(tmp_path, plots=False)
    assert summary["verdicts"]["infra_error"] == 1 and summary["scored_samples"] == 8
    assert summary["pass_at_k"]["1"] == pytest.approx((3 / 5 + 1 / 3) / 2)
    assert summary["fast_p"]["1.0"] == pytest.approx(3 / 8)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_a_tasks_first_sample_runs_alone_so_its_reference_is_timed_once(tmp_path: Path) -> None:
    ev = Double(max_in_flight=4)
    run_bench(_samples({"l1_relu": [f"correct:{i + 1}" for i in range(6)], "l1_add": ["incorrect"]}), tmp_path,
              OPTS, evaluator=ev)  # fmt: skip
    # The first l1_relu sample ran alone; the other task started beside it; then l1_relu's ran together.
    assert [c[0] for c in ev.calls[:2]] == ["l1_relu", "l1_add"]
    assert ev.peak["l1_relu"] > 1


def test_resume_after_an_interrupted_run_evaluates_only_what_is_missing(tmp_path: Path) -> None:
    samples = _samples(GENS)
    first = Double()
    run_bench(samples, tmp_path, BenchOptions(backend="cpu", progress=False, limit=4), evaluator=first)
    results = tmp_path / "results.jsonl"
    before = results.read_text()
    with results.open("a") as f:
        f.write('{"task": "l1_add", "sample": 3, "resu')  # a write cut off by the interruption
    with pytest.raises(MusaEnvError, match="--resume"):
        run_bench(samples, tmp_path, OPTS, evaluator=Double())
    with pytest.raises(MusaEnvError, match="seed"):
        run_bench(samples, tmp_path, BenchOptions(backend="cpu", progress=False, seed=1, resume=True))
    second = Double()
    stats = run_bench(samples, tmp_path, BenchOptions(backend="cpu", progress=False, resume=True), evaluator=second)
    assert results.read_text().startswith(before)  # the earlier rows, byte for byte
    done_first = {(t, r) for t, r in first.calls}
    assert not done_first & set(second.calls)  # nothing evaluated twice ...
    assert ("l1_add", "raise") in second.calls  # ... except the infra_error, which is not final
    assert stats.already_done == 4 and stats.left == 0
    resumed = write_reports(tmp_path, plots=False)
    third = Double()
    stats = run_bench(samples, tmp_path, BenchOptions(backend="cpu", progress=False, resume=True), evaluator=third)
    # The infra_error again, and only it.
    assert third.calls == [("l1_add", "raise")] and stats.already_done == 8
    assert write_reports(tmp_path, plots=False) == resumed
    fresh = tmp_path / "fresh"
    run_bench(samples, fresh, OPTS, evaluator=Double())
    assert write_reports(fresh, plots=False) == resumed  # the same summary as an uninterrupted run


def test_reports_plots_and_compare(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run_bench(_samples(GENS), tmp_path / "a", OPTS, evaluator=Double())
    better = {"l1_relu": ["correct:3"] * 5, "l1_add": ["incorrect"] * 4}
    run_bench(_samples(better), tmp_path / "b", OPTS, evaluator=Double())
    write_reports(tmp_path / "a")
    for name in ("fast_p.png", "speedups.png", "verdicts_by_level.png"):
        assert (tmp_path / "a" / name).stat().st_size > 1000
    md = (tmp_path / "a" / "summary.md").read_text()
    assert "| pass@2 |" in md and "pass@4" not in md and "fast_1.1 (vs eager)" in md and "![fast_p](fast_p.png)" in md
    text = compare_runs(tmp_path / "a", tmp_path / "b")  # b has no summary.json yet: computed from its rows
    # Paired by sample: l1_relu's 2 extra correct samples in B and its 3 faster ones are too few to tell noise
    # from a difference (sign test p = 0.5, 1 after Holm; t test on 3 log ratios p = 0.1); l1_add's "raise" sample
    # (infra_error) is not paired.
    assert "| l1_relu | 5 (0) | 3 | 5 | 1 | 2.88 (0.60-13.94), n=3 | 0.102 | no significant difference |" in text
    assert "| l1_add | 3 (0) | 1 | 0 | 1 | - | - | no significant difference |" in text
    assert "Tasks with a significant difference: none." in text
    assert "**Overall**: no significant difference." in text
