"""The field's metrics over many evaluated samples. Pure Python, no torch.

* **pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): with n samples of a
  task of which c are correct, pass@k = 1 - C(n - c, k) / C(n, k), the unbiased estimate of the chance that at
  least one of k samples drawn without replacement is correct; averaged over tasks. As the human-eval reference
  code does, a k is reported only when every task has at least k samples.
* **fast_p** (KernelBench, Ouyang et al. 2025): the fraction of all samples that are correct *and* faster than
  the baseline by more than p, i.e. speedup > p. fast_0 is the correctness rate (a correct sample that was not
  timed counts for p = 0 only); p = 1.1 is MusaCoder's "faster rate". With paired timing (the default) a sample
  passes p only when the lower end of its speedup's 95 % interval does (docs/rewards.md, the threshold rule): a
  speedup whose interval straddles p is not claimed as faster than p. Without an interval (a cached reference
  timing) the point estimate decides, as in KernelBench.
* **Avg@k** (MusaCoder): the mean over tasks of the fraction of the task's k samples that are correct. Its
  expectation equals pass@1; it is reported under MusaCoder's name so their tables can be matched.
* **geomean_speedup**: the geometric mean of the speedups of the correct, timed samples.
* **build_tiers**: the share of samples per build path (``EvalResult.build_tier``: ``split``, ``pch``, ``torch``,
  ``cuda_split``...; ``none`` when nothing was built) and the median build seconds of those that built (not all
  from the cache): why one run's builds took 4 s and another's 400 s.

Samples whose verdict says nothing about the model (``infra_error``: the harness failed; ``compiled``: built for a
device that is not here, never run) are counted in ``verdicts`` but left out of every rate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAST_P_THRESHOLDS",
    "UNSCORED_VERDICTS",
    "Outcome",
    "avg_at_k",
    "fast_p",
    "geomean",
    "pass_at_k",
    "pass_at_k_values",
    "summarize",
    "tier_shares",
]

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.1, 1.5, 2.0)
"""KernelBench's fast_p thresholds plus MusaCoder's 1.1 ("faster rate")."""

UNSCORED_VERDICTS: frozenset[str] = frozenset({"infra_error", "compiled"})
"""Verdicts left out of every rate (they say nothing about the model)."""


@dataclass(frozen=True)
class Outcome:
    """What the metrics need of one evaluated sample.

    Attributes:
        task: Task key (the samples of one task share it).
        level: KernelBench level of the task.
        stage: Verdict (an :class:`~musaenv.types.Stage` value such as ``correct``).
        speedup: Baseline time / candidate time, ``None`` when not timed.
        pass_fraction: Fraction of correctness trials passed.
        speedup_low: Lower end of the speedup's 95 % interval (paired timing), ``None`` without one.
        build_tier: The sample's build path (``EvalResult.build_tier``), ``None`` when nothing was built.
        build_s: Seconds its builds that ran took (cache hits left out), ``None`` when every build was a cache hit
            or there was none.
    """

    task: str
    level: int
    stage: str
    speedup: float | None = None
    pass_fraction: float = 0.0
    speedup_low: float | None = None
    build_tier: str | None = None
    build_s: float | None = None

    @property
    def correct(self) -> bool:
        """True when the verdict is ``correct``."""
        return self.stage == "correct"

    @property
    def scored(self) -> bool:
        """False for verdicts that say nothing about the model (:data:`UNSCORED_VERDICTS`)."""
        return self.stage not in UNSCORED_VERDICTS


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, eq. 1).

    Exact integer binomials, so large n loses no precision.

    Args:
        n: Samples of the task (n >= 1).
        c: Correct samples (0 <= c <= n).
        k: Samples drawn (1 <= k <= n).

    Raises:
        ValueError: the counts are out of range; in particular k > n, where pass@k cannot be estimated.
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass@k: expected n >= 1 and 0 <= c <= n, found n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k: expected 1 <= k <= n, found k={k} with n={n}; draw more samples or a smaller k")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_values(samples_per_task: Iterable[int]) -> list[int]:
    """The k to report: 1 and each power of two up to the fewest samples any task has (none when no tasks)."""
    counts = list(samples_per_task)
    if not counts or min(counts) < 1:
        return []
    ks, k = [], 1
    while k <= min(counts):
        ks.append(k)
        k *= 2
    return ks


def fast_p(outcomes: Sequence[Outcome], p: float) -> float | None:
    """KernelBench's fast_p: fraction of the scored samples that are correct with speedup > p (``None`` if none).

    A correct sample without a speedup (timing disabled) counts for p = 0 only: any real speedup exceeds 0. With a
    speedup interval, its lower end must exceed p (the threshold rule of docs/rewards.md).
    """
    scored = [o for o in outcomes if o.scored]
    if not scored:
        return None
    hits = sum(1 for o in scored if o.correct and (_claimed(o) > p if o.speedup is not None else p == 0.0))
    return hits / len(scored)


def _claimed(o: Outcome) -> float:
    """The speedup a threshold is judged on: the interval's lower end when there is one, else the point estimate."""
    assert o.speedup is not None
    return o.speedup_low if o.speedup_low is not None else o.speedup


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive finite values (``None`` when there are none)."""
    logs = [math.log(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def avg_at_k(counts: Sequence[tuple[int, int]]) -> float | None:
    """MusaCoder's Avg@k: the mean over tasks of c / n, for per-task ``(n, c)`` counts (``None`` when empty)."""
    fractions = [c / n for n, c in counts if n > 0]
    return sum(fractions) / len(fractions) if fractions else None


def _per_task(scored: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    tasks: dict[str, dict[str, Any]] = {}
    for o in scored:
        t = tasks.setdefault(o.task, {"level": o.level, "n": 0, "correct": 0, "best_speedup": None})
        t["n"] += 1
        if o.correct:
            t["correct"] += 1
            if o.speedup is not None and (t["best_speedup"] is None or o.speedup > t["best_speedup"]):
                t["best_speedup"] = o.speedup
    return tasks


def _rates(outcomes: Sequence[Outcome], thresholds: Sequence[float]) -> dict[str, Any]:
    """The rates of one group of samples (all of them, or one level's)."""
    scored = [o for o in outcomes if o.scored]
    per_task = _per_task(scored)
    counts = [(t["n"], t["correct"]) for t in per_task.values()]
    ks = pass_at_k_values(n for n, _ in counts)
    return {
        "tasks": len({o.task for o in outcomes}),
        "samples": len(outcomes),
        "scored_samples": len(scored),
        "verdicts": dict(sorted(Counter(o.stage for o in outcomes).items())),
        "correct_rate": sum(o.correct for o in scored) / len(scored) if scored else None,
        "pass_at_k": {str(k): sum(pass_at_k(n, c, k) for n, c in counts) / len(counts) for k in ks},
        "avg_at_k": {str(min(n for n, _ in counts)): avg_at_k(counts)} if counts else {},
        "mean_trial_pass_fraction": sum(o.pass_fraction for o in scored) / len(scored) if scored else None,
        "fast_p": {str(float(p)): fast_p(scored, p) for p in thresholds},
        "geomean_speedup": geomean(o.speedup for o in scored if o.correct and o.speedup is not None),
    }


def tier_shares(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    """Per build path (``none``: nothing built): ``samples``, ``share`` of all samples, ``built`` (samples whose
    builds ran, not all cache hits) and ``median_build_s`` over those (``None`` when none ran); every verdict
    counts (a build's path does not depend on the verdict). Most common path first."""
    by_tier: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_tier.setdefault(o.build_tier or "none", []).append(o)
    out: dict[str, dict[str, Any]] = {}
    for tier, group in sorted(by_tier.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        built = sorted(o.build_s for o in group if o.build_s is not None)
        mid = len(built) // 2
        median = None if not built else built[mid] if len(built) % 2 else (built[mid - 1] + built[mid]) / 2
        out[tier] = {"samples": len(group), "share": len(group) / len(outcomes), "built": len(built),
                     "median_build_s": median}  # fmt: skip
    return out


def summarize(outcomes: Iterable[Outcome], thresholds: Sequence[float] = FAST_P_THRESHOLDS) -> dict[str, Any]:
    """Every metric over all samples, per level (``by_level``) and per task (``per_task``); JSON-safe.

    Keys: ``tasks``, ``samples``, ``scored_samples``, ``verdicts``, ``correct_rate``, ``pass_at_k`` (``{"1": ..}``),
    ``avg_at_k`` (``{"<k>": ..}``, k the fewest samples of a task), ``mean_trial_pass_fraction``, ``fast_p``
    (``{"0.0": ..}``), ``geomean_speedup``, ``by_level`` (``{"1": {the same keys}}``), ``per_task``,
    ``build_tiers`` (:func:`tier_shares`, over all samples).
    Rates are ``None`` when no sample is scored. Independent of the order of ``outcomes``.
    """
    outs = sorted(outcomes, key=lambda o: (o.level, o.task))
    summary = _rates(outs, thresholds)
    levels = sorted({o.level for o in outs})
    summary["by_level"] = {str(lv): _rates([o for o in outs if o.level == lv], thresholds) for lv in levels}
    summary["per_task"] = dict(sorted(_per_task([o for o in outs if o.scored]).items()))
    summary["build_tiers"] = tier_shares(outs)
    return summary
