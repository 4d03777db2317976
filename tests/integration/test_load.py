"""Honest shipped solutions stay ``correct`` beside busy loops (two per core): the limits measure the candidate."""

from __future__ import annotations

import pytest

from benchmarks.load_independence import FUSED_DIR, LOADS, compare, speedups

pytestmark = pytest.mark.slow

TASKS = ["l1_relu", "l1_add", "l1_gelu"]  # builds cached by the suite's earlier tests (a few seconds cold each)


def test_saturated_host_changes_no_honest_verdict() -> None:
    report = compare(TASKS, per_core=2)
    assert [r["stage"] for r in report["idle"]] == ["correct"] * len(TASKS), report
    # a retried infra_error is allowed by the issue, but the pool retries it: what comes back must be correct
    assert [r["stage"] for r in report["saturated"]] == ["correct"] * len(TASKS), report


def test_speedups_under_load_run_the_paired_machinery() -> None:
    """The short version of the speedup benchmark (issue 26): one honest fused kernel, faster than its reference,
    once per load level. Asserts the paired machinery (every evaluation correct with paired samples and an interval
    around its median, the summary's targets computed), never the timings themselves."""
    task = str(FUSED_DIR / "bias_relu.py")
    report = speedups([task], evals=1, modes=["paired"])
    rows = report["rows"]
    assert sorted(r["load"] for r in rows) == list(LOADS), rows
    for r in rows:
        assert r["stage"] == "correct" and not r["flags"], r
        assert r["pairs"] and r["pairs"] >= 6, r
        assert r["low"] <= r["speedup"] <= r["high"], r
    summary = report["summary"]["paired"]
    assert set(summary["tasks"]) == {"bias_relu"}
    assert set(summary["targets"]) == {"speedup_within_10pct", "score_95pct", "fast_1.0_same"}
    assert 0.0 <= summary["score_within_0.1"] <= 1.0
