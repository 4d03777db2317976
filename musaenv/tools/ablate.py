"""Offline reward ablation: re-score recorded episodes under several shapers, without recompiling anything.

Episodes recorded with :class:`musaenv.recording.RecordEpisodes` carry every turn's verdict. For each shaper this
module recomputes s(c) from the verdicts (with the recorded lambda and v_max), shapes each group of episodes
(``group_rewards``, so TCPO's hindsight term sees its peers) and reports:

* return statistics (mean, std, min, max);
* the share of groups whose returns are all equal, i.e. whose GRPO advantages are zero (no learning signal);
* how the credit (absolute per-turn reward) splits between the first turn and later turns;
* for every pair of shapers, how often the GRPO advantage of an episode has opposite signs under the two.

Groups: episodes with the same ``group`` label, or, when unlabelled, all episodes of the same task; the group
sizes come from the data. Pure Python, no torch; the plots need matplotlib (imported only when plotting).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from musaenv.errors import ConfigError, MusaEnvError
from musaenv.rewards.base import RewardShaper, make_shaper, shaper_kwargs
from musaenv.rewards.group import grpo_advantages, zero_advantage
from musaenv.rewards.score import candidate_score
from musaenv.tools.ablate_report import fmt, plot_ablation, write_episodes, write_tables

__all__ = ["AblationSummary", "ShaperStats", "add_ablate_subparser", "parse_shaper_spec", "run_ablation"]

log = logging.getLogger(__name__)

SIGN_TOL = 1e-9  # advantages within this of 0 have no sign (an all-equal group gives exactly 0)


@dataclass(frozen=True)
class ShaperStats:
    """What one shaper makes of the recorded episodes.

    Attributes:
        shaper: Label (the spec given, e.g. ``primeecho`` or ``primeecho:alpha=0.5``).
        episodes: Episodes scored.
        return_mean: Mean episode return.
        return_std: Population standard deviation of the returns.
        return_min: Smallest return.
        return_max: Largest return.
        zero_advantage_share: Share of groups (of at least 2 episodes) whose returns are all equal.
        first_turn_credit_share: Sum of |reward| on turn 1 over the sum of |reward| on all turns (``None`` when
            every reward is 0).
        multi_turn_first_share: The same, over episodes with at least 2 turns only.
        later_turns_trained_share: Share of turns after the first that have a non-zero loss weight.
    """

    shaper: str
    episodes: int
    return_mean: float
    return_std: float
    return_min: float
    return_max: float
    zero_advantage_share: float | None
    first_turn_credit_share: float | None
    multi_turn_first_share: float | None
    later_turns_trained_share: float | None


@dataclass(frozen=True)
class AblationSummary:
    """Result of :func:`run_ablation`.

    Attributes:
        files: Trajectory files read.
        episodes: Episodes read.
        groups: Groups with at least 2 episodes (the ones that define advantages).
        group_sizes: Sorted sizes of all groups.
        shapers: One :class:`ShaperStats` per shaper, in the order given.
        disagreement: ``"a|b"`` -> share of episodes (in groups of >= 2) whose GRPO advantages have opposite
            signs under shapers a and b.
        sign_mismatch: ``"a|b"`` -> share whose advantage signs differ at all (zero counts as a sign).
        examples: ``"a|b"`` -> up to 3 episodes where a and b disagree (task, episode, scores, advantages).
        outputs: Files written (``summary.md``, ``summary.csv``, ``disagreement.csv``, ``episodes.csv``, PNGs).
    """

    files: list[str]
    episodes: int
    groups: int
    group_sizes: list[int]
    shapers: list[ShaperStats]
    disagreement: dict[str, float]
    sign_mismatch: dict[str, float]
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return asdict(self)


def parse_shaper_spec(spec: str) -> tuple[str, dict[str, float]]:
    """Parse ``name`` or ``name:key=value:key=value`` (numeric values) into a shaper name and keywords.

    Raises:
        ConfigError: a malformed ``key=value`` or a non-numeric value.
    """
    name, *parts = spec.strip().split(":")
    kwargs: dict[str, float] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ConfigError(f"shaper spec {spec!r}: expected name:key=value[:key=value...], found {part!r}.")
        try:
            kwargs[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"shaper spec {spec!r}: expected a number for {key}, found {value!r}.") from None
    return name.strip(), kwargs


def _build_shaper(spec: str, speedup_weight: float, speedup_cap: float) -> RewardShaper:
    name, kwargs = parse_shaper_spec(spec)
    accepted = shaper_kwargs(name)
    for key, value in (("speedup_weight", speedup_weight), ("speedup_cap", speedup_cap)):
        if key in accepted:
            kwargs.setdefault(key, value)
    return make_shaper(name, **kwargs)


@dataclass
class _Episode:
    record: Any  # musaenv.recording.EpisodeRecord (typed loosely to keep this import lazy)
    scores: list[float | None]
    results: list[Any]


def _load(files: Sequence[str | os.PathLike[str]]) -> tuple[list[_Episode], float, float]:
    from musaenv.recording import iter_episodes

    records = list(iter_episodes(files))
    if not records:
        raise MusaEnvError(f"no finished episodes in {[str(f) for f in files]}; record some with RecordEpisodes.")
    params = {(r.speedup_weight, r.speedup_cap) for r in records}
    if len(params) > 1:
        log.warning(
            "episodes were recorded with different score parameters %s; each is re-scored with its own", sorted(params)
        )
    episodes = []
    for r in records:
        results = r.results
        scores = [candidate_score(res, r.speedup_weight, r.speedup_cap) for res in results]
        episodes.append(_Episode(r, scores, results))
    weight, cap = records[0].speedup_weight, records[0].speedup_cap
    return episodes, weight, cap


def _groups(episodes: list[_Episode]) -> list[list[int]]:
    by_key: dict[str, list[int]] = {}
    for i, ep in enumerate(episodes):
        by_key.setdefault(ep.record.group_key, []).append(i)
    return list(by_key.values())


def _shape_all(shaper: RewardShaper, episodes: list[_Episode], groups: list[list[int]]) -> list[list[float]]:
    """Per-turn rewards of every episode, shaped group by group."""
    out: list[list[float]] = [[] for _ in episodes]
    for members in groups:
        rewards = shaper.group_rewards([episodes[i].scores for i in members], [episodes[i].results for i in members])
        for i, r in zip(members, rewards, strict=True):
            out[i] = r
    return out


def _share(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _stats(
    label: str, shaper: RewardShaper, episodes: list[_Episode], rewards: list[list[float]], groups: list[list[int]]
) -> ShaperStats:
    returns = [math.fsum(r) for r in rewards]
    n = len(returns)
    mean = math.fsum(returns) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in returns) / n)
    real_groups = [g for g in groups if len(g) >= 2]
    zero = sum(zero_advantage([returns[i] for i in g]) for g in real_groups)
    first = math.fsum(abs(r[0]) for r in rewards if r)
    total = math.fsum(abs(x) for r in rewards for x in r)
    multi = [r for r in rewards if len(r) >= 2]
    later_weights = [w for ep in episodes for w in shaper.loss_weights(ep.scores)[1:]]
    return ShaperStats(
        shaper=label,
        episodes=n,
        return_mean=mean,
        return_std=std,
        return_min=min(returns),
        return_max=max(returns),
        zero_advantage_share=_share(zero, len(real_groups)),
        first_turn_credit_share=_share(first, total),
        multi_turn_first_share=_share(math.fsum(abs(r[0]) for r in multi), math.fsum(abs(x) for r in multi for x in r)),
        later_turns_trained_share=_share(sum(w > 0 for w in later_weights), len(later_weights)),
    )


def _signs(returns: list[float], groups: list[list[int]]) -> tuple[dict[int, int], dict[int, float]]:
    signs: dict[int, int] = {}
    advs: dict[int, float] = {}
    for g in groups:
        if len(g) < 2:
            continue
        for i, a in zip(g, grpo_advantages([returns[i] for i in g]), strict=True):
            advs[i] = a
            signs[i] = 0 if abs(a) <= SIGN_TOL else (1 if a > 0 else -1)
    return signs, advs


def _disagreements(
    labels: list[str], returns: dict[str, list[float]], episodes: list[_Episode], groups: list[list[int]]
) -> tuple[dict[str, float], dict[str, float], dict[str, list[dict[str, Any]]]]:
    signed = {lab: _signs(returns[lab], groups) for lab in labels}
    opposite: dict[str, float] = {}
    mismatch: dict[str, float] = {}
    examples: dict[str, list[dict[str, Any]]] = {}
    for a, b in itertools.combinations(labels, 2):
        (sa, aa), (sb, ab) = signed[a], signed[b]
        idx = sorted(sa)
        key = f"{a}|{b}"
        if not idx:
            continue
        opp = [i for i in idx if sa[i] * sb[i] < 0]
        opposite[key] = len(opp) / len(idx)
        mismatch[key] = sum(sa[i] != sb[i] for i in idx) / len(idx)
        examples[key] = [
            {
                "task_id": episodes[i].record.task_id,
                "episode": episodes[i].record.episode,
                "group": episodes[i].record.group_key,
                "scores": [None if s is None else round(s, 3) for s in episodes[i].scores],
                "stages": [r.stage.value for r in episodes[i].results],
                f"adv_{a}": round(aa[i], 3),
                f"adv_{b}": round(ab[i], 3),
            }
            for i in opp[:3]
        ]
    return opposite, mismatch, examples


def run_ablation(
    trajectory_files: Sequence[str | os.PathLike[str]],
    shapers: Sequence[str],
    out_dir: str | os.PathLike[str],
    *,
    plots: bool = True,
) -> AblationSummary:
    """Re-score recorded episodes under each shaper and write the tables and plots into ``out_dir``.

    Files: ``summary.md`` (Markdown tables), ``summary.csv`` (one row per shaper), ``disagreement.csv`` (one row
    per pair of shapers), ``episodes.csv`` (per episode: verdicts, return and GRPO advantage under each shaper),
    and ``returns.png``, ``credit.png``, ``disagreement.png``.

    Args:
        trajectory_files: JSONL files written by :class:`~musaenv.recording.RecordEpisodes`.
        shapers: Shaper specs: a registered name, optionally with numeric parameters
            (``primeecho:alpha=0.5``). Shapers that invert scores get the recorded lambda and v_max.
        out_dir: Directory for the outputs (created).
        plots: Write PNG plots (needs matplotlib; skipped with a warning when it is missing).

    Returns:
        The :class:`AblationSummary` (also written as the files above).

    Raises:
        MusaEnvError: no episodes, an unreadable file, or an unknown shaper / parameter (:class:`ConfigError`).
    """
    labels = list(dict.fromkeys(s.strip() for s in shapers if s.strip()))
    if not labels:
        raise ConfigError("run_ablation: expected at least one shaper name, found none.")
    episodes, weight, cap = _load(trajectory_files)
    built = {lab: _build_shaper(lab, weight, cap) for lab in labels}
    groups = _groups(episodes)
    rewards = {lab: _shape_all(built[lab], episodes, groups) for lab in labels}
    returns = {lab: [math.fsum(r) for r in rewards[lab]] for lab in labels}
    stats = [_stats(lab, built[lab], episodes, rewards[lab], groups) for lab in labels]
    opposite, mismatch, examples = _disagreements(labels, returns, episodes, groups)
    summary = AblationSummary(
        files=[str(f) for f in trajectory_files],
        episodes=len(episodes),
        groups=sum(len(g) >= 2 for g in groups),
        group_sizes=sorted(len(g) for g in groups),
        shapers=stats,
        disagreement=opposite,
        sign_mismatch=mismatch,
        examples=examples,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    advantages = {lab: _signs(returns[lab], groups)[1] for lab in labels}
    rows = [(ep.record, ep.scores) for ep in episodes]
    written = [*write_tables(summary, out), write_episodes(rows, returns, advantages, out / "episodes.csv")]
    if plots:
        written += plot_ablation(summary, returns, rewards, out)
    summary.outputs.extend(str(p) for p in written)
    return summary


DEFAULT_SHAPERS = "primeecho,best,last,per_turn,delta,kevin,tcpo"


def add_ablate_subparser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``musaenv ablate`` on an ``argparse`` sub-parser set; the handler is ``args.func``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "ablate", help="re-score recorded episodes under several reward shapers (no recompiling)"
    )
    p.add_argument("--trajectories", nargs="+", required=True, metavar="FILE", help="JSONL files of RecordEpisodes")
    p.add_argument(
        "--shapers",
        default=DEFAULT_SHAPERS,
        help=f"comma-separated shaper specs, e.g. primeecho,best or primeecho:alpha=0.5 (default {DEFAULT_SHAPERS})",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory for summary.md, summary.csv and plots")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=ablate_command)
    return p


def ablate_command(args: argparse.Namespace) -> int:
    """Handler of ``musaenv ablate``: run the ablation and print a short table; returns the exit code."""
    summary = run_ablation(args.trajectories, _split(args.shapers), args.out, plots=not args.no_plots)
    short = ["shaper", "mean R", "std R", "zero-adv groups", "turn-1 credit"]
    rows = [
        [
            s.shaper,
            fmt(s.return_mean),
            fmt(s.return_std),
            fmt(s.zero_advantage_share),
            fmt(s.first_turn_credit_share),
        ]
        for s in summary.shapers
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(short)]
    print(f"{summary.episodes} episodes, {summary.groups} groups")
    for row in [short, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"wrote {', '.join(summary.outputs)}")
    return 0


def _split(specs: str | Iterable[str]) -> list[str]:
    items = [specs] if isinstance(specs, str) else list(specs)
    return [s for item in items for s in item.split(",") if s.strip()]
