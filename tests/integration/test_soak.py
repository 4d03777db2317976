"""A short soak (benchmarks/soak.py): vector envs stepped with honest, broken and hostile responses leak nothing."""

from __future__ import annotations

import pytest

from benchmarks.soak import run_soak

pytestmark = pytest.mark.slow


def test_short_soak_leaks_no_process_descriptor_or_memory() -> None:
    report = run_soak(steps=16, num_envs=2, seed=3)
    start, end, closed = report["start"], report["end"], report["after_close"]
    assert report["evaluations"] >= 8, report
    assert report["verdicts"].get("correct", 0) >= 1, report  # the honest responses still pass beside the hostile
    assert closed["left"] == [], report  # nothing of the pool, fork server, workers or builders is left
    assert closed["unreaped"] == [], report  # and every child the run started was reaped
    assert closed["open_fds"] <= start["open_fds"], report  # closing gives back every descriptor the run opened
    assert end["open_fds"] <= start["open_fds"] + 4, report  # and a running pool does not accumulate them
    assert end["rss_mb"] - start["rss_mb"] < 150, report  # bounded growth of the parent (measured: +25 MB)
