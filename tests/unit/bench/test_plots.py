"""The bench plots: every correct timed sample lands in a histogram bin, and the axes say their units."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from musaenv.bench.metrics import Outcome
from musaenv.bench.plots import speedup_bin_edges, write_plots

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
plt = pytest.importorskip("matplotlib.pyplot")

# The run of issue 31: eight correct samples, the histogram showed six (the smallest speedup sat one ulp below the
# first edge that 10 ** log10(min) gave back).
ISSUE_SPEEDUPS = [0.2, 0.2, 0.41, 0.77, 0.95, 1.2, 1.9, 2.6]


def _outcomes(speeds: list[float]) -> list[Outcome]:
    correct = [Outcome(task=f"t{i}", level=1, stage="correct", speedup=s) for i, s in enumerate(speeds)]
    others = [Outcome(task="x", level=2, stage="compile_error"), Outcome(task="y", level=1, stage="wrong_output")]
    return correct + others


def _drawn_counts(speeds: list[float]) -> float:
    """Write the plots as a user gets them and count the samples the speedup histogram's bars hold."""
    from musaenv.bench import plots

    fig, ax = plt.subplots()
    try:
        plots._speedup_histogram(ax, _outcomes(speeds), "eager")
        return sum(p.get_height() for p in ax.patches)
    finally:
        plt.close(fig)


def test_issue_run_shows_all_eight_samples() -> None:
    assert _drawn_counts(ISSUE_SPEEDUPS) == len(ISSUE_SPEEDUPS)


@pytest.mark.parametrize("seed", range(5))
def test_every_sample_lands_in_a_bin(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        speeds = [10 ** rng.uniform(-3, 2) for _ in range(rng.randint(1, 12))]
        counts, _ = np.histogram(speeds, bins=speedup_bin_edges(speeds))
        assert counts.sum() == len(speeds), speeds
    assert _drawn_counts(speeds) == len(speeds)


def test_edges_are_increasing_and_span_one() -> None:
    for speeds in ([1.0], [5.0, 5.0], [0.001], ISSUE_SPEEDUPS):
        edges = speedup_bin_edges(speeds)
        assert all(a < b for a, b in itertools.pairwise(edges))
        assert edges[0] <= min(speeds) and edges[-1] >= max(speeds)
        assert edges[0] < 1.0 < edges[-1]


def test_plots_are_written_with_units(tmp_path: Path) -> None:
    made = write_plots(tmp_path, _outcomes(ISSUE_SPEEDUPS), {"baseline": "eager"})
    assert made == ["fast_p.png", "speedups.png", "verdicts_by_level.png"]
    for name in made:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from musaenv.bench import plots

    fig, ax = plt.subplots()
    try:
        plots._speedup_histogram(ax, _outcomes(ISSUE_SPEEDUPS), "eager")
        assert "×" in ax.get_xlabel() and "eager" in ax.get_xlabel()
        assert "count" in ax.get_ylabel()
        assert "8" in ax.get_title()
    finally:
        plt.close(fig)
