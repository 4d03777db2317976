"""Honest shipped solutions stay ``correct`` beside busy loops (two per core): the limits measure the candidate."""

from __future__ import annotations

import pytest

from benchmarks.load_independence import compare

pytestmark = pytest.mark.slow

TASKS = ["l1_relu", "l1_add", "l1_gelu"]  # builds cached by the suite's earlier tests (a few seconds cold each)


def test_saturated_host_changes_no_honest_verdict() -> None:
    report = compare(TASKS, per_core=2)
    assert [r["stage"] for r in report["idle"]] == ["correct"] * len(TASKS), report
    # a retried infra_error is allowed by the issue, but the pool retries it: what comes back must be correct
    assert [r["stage"] for r in report["saturated"]] == ["correct"] * len(TASKS), report
