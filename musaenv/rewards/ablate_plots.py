"""PNG plots of an offline reward ablation (:mod:`musaenv.rewards.ablate`). matplotlib is imported lazily."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from musaenv.rewards.ablate import AblationSummary

__all__ = ["plot_ablation"]

log = logging.getLogger(__name__)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never a window
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_ablation(
    summary: AblationSummary, returns: dict[str, list[float]], rewards: dict[str, list[list[float]]], out: Path
) -> list[Path]:
    """Write ``returns.png``, ``credit.png`` and ``disagreement.png`` into ``out``; returns the paths written.

    Without matplotlib nothing is written and a warning says how to get it (``pip install musaenv[plots]``).
    """
    plt = _pyplot()
    if plt is None:
        log.warning("matplotlib is not installed, so no plots were written; pip install 'musaenv[plots]'")
        return []
    labels = [s.shaper for s in summary.shapers]
    paths = [_returns(plt, labels, returns, out), _credit(plt, labels, rewards, out)]
    if len(labels) >= 2:
        paths.append(_disagreement(plt, labels, summary, out))
    return paths


def _returns(plt: Any, labels: list[str], returns: dict[str, list[float]], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2, 3.6))
    ax.boxplot([returns[lab] for lab in labels], showmeans=True)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right")
    ax.set_ylabel("episode return")
    ax.set_title("Episode returns per shaper")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "returns.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _credit(plt: Any, labels: list[str], rewards: dict[str, list[list[float]]], out: Path) -> Path:
    turns = max((len(r) for lab in labels for r in rewards[lab]), default=1)
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2, 3.6))
    bottom = [0.0] * len(labels)
    for k in range(turns):
        shares = []
        for lab in labels:
            total = sum(abs(x) for r in rewards[lab] for x in r)
            part = sum(abs(r[k]) for r in rewards[lab] if len(r) > k)
            shares.append(part / total if total > 0 else 0.0)
        ax.bar(labels, shares, bottom=bottom, label=f"turn {k + 1}")
        bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
    ax.set_ylabel("share of |credit|")
    ax.set_title("Where the credit goes, by turn")
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "credit.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _disagreement(plt: Any, labels: list[str], summary: AblationSummary, out: Path) -> Path:
    n = len(labels)
    grid = [[0.0] * n for _ in range(n)]
    for i, a in enumerate(labels):
        for j, b in enumerate(labels):
            if i != j:
                grid[i][j] = summary.disagreement.get(f"{a}|{b}", summary.disagreement.get(f"{b}|{a}", 0.0))
    fig, ax = plt.subplots(figsize=(0.8 * n + 2.5, 0.8 * n + 1.5))
    im = ax.imshow(grid, cmap="Reds", vmin=0.0, vmax=max(0.01, max(max(row) for row in grid)))
    ax.set_xticks(range(n), labels, rotation=45, ha="right")
    ax.set_yticks(range(n), labels)
    for i in range(n):
        for j in range(n):
            if i != j:
                ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center", fontsize=8)
    ax.set_title("GRPO advantage sign disagreement")
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    path = out / "disagreement.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
