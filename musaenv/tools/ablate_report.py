"""Report files of an offline reward ablation (:mod:`musaenv.tools.ablate`): Markdown and CSV tables, PNG plots.

matplotlib is imported only when plotting.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from musaenv.recording import EpisodeRecord
    from musaenv.tools.ablate import AblationSummary

__all__ = ["STAT_HEADER", "fmt", "plot_ablation", "write_episodes", "write_tables"]

log = logging.getLogger(__name__)


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for a table: fixed digits, ``-`` for ``None``."""
    return "-" if x is None else f"{x:.{digits}f}"


def _stat_rows(summary: AblationSummary) -> list[list[str]]:
    return [
        [
            s.shaper,
            str(s.episodes),
            fmt(s.return_mean),
            fmt(s.return_std),
            fmt(s.return_min),
            fmt(s.return_max),
            fmt(s.zero_advantage_share),
            fmt(s.first_turn_credit_share),
            fmt(s.multi_turn_first_share),
            fmt(s.later_turns_trained_share),
        ]
        for s in summary.shapers
    ]


STAT_HEADER = [
    "shaper",
    "episodes",
    "mean R",
    "std R",
    "min R",
    "max R",
    "zero-adv groups",
    "turn-1 credit",
    "turn-1 credit (multi-turn)",
    "later turns trained",
]


def write_tables(summary: AblationSummary, out: Path) -> list[Path]:
    """Write ``summary.md``, ``summary.csv`` and ``disagreement.csv`` into ``out``; returns their paths."""
    labels = [s.shaper for s in summary.shapers]
    md = [
        "# Reward ablation",
        "",
        f"{summary.episodes} episodes from {len(summary.files)} file(s); {summary.groups} groups of >= 2 episodes "
        f"(sizes {summary.group_sizes}).",
        "",
        "| " + " | ".join(STAT_HEADER) + " |",
        "|" + "---|" * len(STAT_HEADER),
        *("| " + " | ".join(row) + " |" for row in _stat_rows(summary)),
        "",
        "Share of episodes whose GRPO advantage has opposite signs under the two shapers:",
        "",
        "| | " + " | ".join(labels) + " |",
        "|" + "---|" * (len(labels) + 1),
    ]
    for a in labels:
        cells = [fmt(_pair(summary.disagreement, a, b), 2) if a != b else "" for b in labels]
        md.append(f"| {a} | " + " | ".join(cells) + " |")
    for key, items in summary.examples.items():
        if items and key.split("|")[0] == labels[0]:  # examples against the first (reference) shaper only
            md += ["", f"Where `{key.replace('|', '` and `')}` disagree (first {len(items)}):", ""]
            md += [
                f"* {ex['task_id']} episode {ex['episode']}: stages {ex['stages']}, scores {ex['scores']}, "
                + ", ".join(f"{k} {v}" for k, v in ex.items() if k.startswith("adv_"))
                for ex in items
            ]
    md_path, csv_path, dis_path = out / "summary.md", out / "summary.csv", out / "disagreement.csv"
    md_path.write_text("\n".join(md) + "\n")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([k for k in asdict(summary.shapers[0])])
        for s in summary.shapers:
            w.writerow(["" if v is None else v for v in asdict(s).values()])
    with open(dis_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["shaper_a", "shaper_b", "opposite_sign_share", "sign_mismatch_share"])
        for key, value in summary.disagreement.items():
            w.writerow([*key.split("|"), value, summary.sign_mismatch[key]])
    return [md_path, csv_path, dis_path]


def write_episodes(
    episodes: Sequence[tuple[EpisodeRecord, list[float | None]]],
    returns: dict[str, list[float]],
    advantages: dict[str, dict[int, float]],
    path: Path,
) -> Path:
    """One row per episode: where it came from, its verdicts, and its return and GRPO advantage per shaper.

    Args:
        episodes: (record, re-computed scores) per episode.
        returns: Shaper label -> return per episode.
        advantages: Shaper label -> episode index -> GRPO advantage (episodes in groups of >= 2 only).
        path: CSV file to write.
    """
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "task_id",
                "group",
                "episode",
                "seed",
                "stages",
                "scores",
                *(f"return:{lab}" for lab in returns),
                *(f"advantage:{lab}" for lab in returns),
            ]
        )
        for i, (r, scores) in enumerate(episodes):
            w.writerow(
                [
                    r.task_id,
                    r.group_key,
                    r.episode,
                    "" if r.seed is None else r.seed,
                    " ".join(t.stage.value for t in r.turns),
                    " ".join("masked" if s is None else f"{s:.4f}" for s in scores),
                    *(f"{returns[lab][i]:.6f}" for lab in returns),
                    *("" if i not in advantages[lab] else f"{advantages[lab][i]:.6f}" for lab in returns),
                ]
            )
    return path


def _pair(table: dict[str, float], a: str, b: str) -> float | None:
    return table.get(f"{a}|{b}", table.get(f"{b}|{a}"))


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
                grid[i][j] = _pair(summary.disagreement, a, b) or 0.0
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
