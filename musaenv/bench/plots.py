"""The plots of a bench run: the fast_p curve, a speedup histogram, verdicts per level (matplotlib, ``plots`` extra).

Without matplotlib the plots are skipped with a warning; the numbers in ``summary.json`` do not depend on them.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from musaenv.bench.metrics import FAST_P_THRESHOLDS, Outcome, fast_p

__all__ = ["speedup_bin_edges", "write_plots"]

log = logging.getLogger(__name__)


def write_plots(out_dir: Path, outcomes: Sequence[Outcome], summary: dict[str, Any]) -> list[str]:
    """Write ``fast_p.png``, ``speedups.png`` and ``verdicts_by_level.png``; returns the names written."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never a window, works without a display
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'musaenv[plots]'); plots skipped")
        return []
    base = summary.get("baseline") or "eager"
    made = []
    for name, draw in (
        ("fast_p.png", lambda ax: _fast_p_curve(ax, outcomes, base)),
        ("speedups.png", lambda ax: _speedup_histogram(ax, outcomes, base)),
        ("verdicts_by_level.png", lambda ax: _verdicts_by_level(ax, outcomes)),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        try:
            draw(ax)
            fig.tight_layout()
            fig.savefig(out_dir / name, dpi=110)
            made.append(name)
        finally:
            plt.close(fig)
    return made


def _fast_p_curve(ax: Any, outcomes: Sequence[Outcome], base: str) -> None:
    speeds = [o.speedup for o in outcomes if o.scored and o.correct and o.speedup is not None]
    top = max([2.5, *[min(s, 50.0) * 1.05 for s in speeds]])
    grid = [top * i / 400 for i in range(401)]
    ax.plot(grid, [100 * (fast_p(outcomes, p) or 0.0) for p in grid], color="tab:blue")
    marks = [(p, fast_p(outcomes, p)) for p in FAST_P_THRESHOLDS]
    ax.plot([p for p, _ in marks], [100 * (v or 0.0) for _, v in marks], "o", color="tab:blue")
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(
        xlabel=f"speedup threshold p (×, {base} time / candidate time)",
        ylabel="correct and speedup > p (% of scored)",
        ylim=(0, 100),
    )
    ax.set_title("fast_p: share of samples correct and faster than p")


def speedup_bin_edges(speeds: Sequence[float], n_bins: int = 30) -> list[float]:
    """Log-spaced histogram edges that hold every speedup in ``speeds`` (all > 0), 1.0 always inside.

    The edges come from ``10 ** log10(x)``, which rounds: the first edge can land one ulp above the smallest
    speedup (and the last one below the largest), and numpy's histogram then drops those samples without a word.
    The outer edges are therefore set to the extremes themselves.
    """
    lo, hi = math.log10(min(speeds)), math.log10(max(speeds))
    lo, hi = min(lo, -0.1), max(hi, 0.1)
    edges = [10 ** (lo + (hi - lo) * i / n_bins) for i in range(n_bins + 1)]
    edges[0] = min(edges[0], min(speeds))
    edges[-1] = max(edges[-1], max(speeds))
    return edges


def _speedup_histogram(ax: Any, outcomes: Sequence[Outcome], base: str) -> None:
    speeds = [o.speedup for o in outcomes if o.scored and o.correct and o.speedup and o.speedup > 0]
    if speeds:
        ax.hist(speeds, bins=speedup_bin_edges(speeds), color="tab:green")
        ax.set_xscale("log")
        _plain_log_ticks(ax)
    else:
        ax.text(0.5, 0.5, "no correct timed samples", ha="center", va="center", transform=ax.transAxes)
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xlabel=f"speedup = {base} time / candidate time (×, log scale)", ylabel="correct samples (count)")
    ax.set_title(f"Speedups of the {len(speeds)} correct timed samples")
    _integer_counts(ax)


def _plain_log_ticks(ax: Any) -> None:
    """Label a log x axis as ``0.3×``, not ``3×10⁻¹``: the minor labels of the default collide on a narrow range."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}×"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _integer_counts(ax: Any) -> None:
    """Counts of samples are whole: no 0.25 ticks."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _verdicts_by_level(ax: Any, outcomes: Sequence[Outcome]) -> None:
    levels = sorted({o.level for o in outcomes})
    counts = {lv: Counter(o.stage for o in outcomes if o.level == lv) for lv in levels}
    stages = sorted({s for c in counts.values() for s in c})
    bottom = [0] * len(levels)
    for stage in stages:
        heights = [counts[lv][stage] for lv in levels]
        ax.bar([str(lv) for lv in levels], heights, bottom=bottom, label=stage)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set(xlabel="KernelBench level", ylabel="samples (count)")
    ax.set_title("Verdicts per level")
    _integer_counts(ax)
    if stages:
        ax.legend(fontsize="small")
