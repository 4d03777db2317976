"""Speed-aware rewards from other kernel-RL projects, for comparison: ``kevin``, ``kernelgym``, ``kernrl``.

They need whether a turn was correct, whether it failed to build, and its speedup. When the turns' ``EvalResult``
records are given these come from ``stage`` and ``speedup``. Without them (or for a turn whose record is ``None``)
they are derived from the MusaCoder score s: correct = s >= 1, build failure = s = -1, and the speedup is
:func:`musaenv.rewards.score.speedup_from_score` (which reads slower kernels as 1.0 and caps at 1 + v_max), so pass
the same ``speedup_weight``/``speedup_cap`` that produced the scores (:func:`shaper_from_config` does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from musaenv.rewards.base import RewardShaper, check_param, register_shaper
from musaenv.rewards.score import FAIL_SCORE, check_score_params, speedup_from_score
from musaenv.types import EvalResult, Stage

__all__ = ["KernRLShaper", "KernelGymShaper", "KevinShaper", "TurnOutcome", "turn_outcomes"]

# kernrl's "compile failure" bucket. Extraction failures never produce a kernel, and cheating is put here so a
# hack never out-earns an honest but slow kernel (kernrl itself has no cheating verdict).
_BUILD_FAILED_STAGES = frozenset({Stage.FORMAT_ERROR, Stage.COMPILE_ERROR, Stage.CHEATING})


@dataclass(frozen=True)
class TurnOutcome:
    """What the non-MusaCoder rewards need to know about one turn.

    Attributes:
        correct: Every correctness trial passed and no defence fired.
        build_failed: No runnable kernel: format error, compile error or cheating (or s = -1 without a record).
        speedup: Reference time / candidate time when correct and timed, else ``None``.
    """

    correct: bool
    build_failed: bool
    speedup: float | None


def _from_result(result: EvalResult) -> TurnOutcome:
    correct = result.stage is Stage.CORRECT
    v = result.speedup
    speedup = float(v) if correct and v is not None and math.isfinite(v) else None
    return TurnOutcome(correct=correct, build_failed=result.stage in _BUILD_FAILED_STAGES, speedup=speedup)


def _from_score(score: float, speedup_weight: float, speedup_cap: float) -> TurnOutcome:
    return TurnOutcome(
        correct=score >= 1.0,
        build_failed=score <= FAIL_SCORE,
        speedup=speedup_from_score(score, speedup_weight, speedup_cap),
    )


def turn_outcomes(
    scores: list[float],
    results: list[EvalResult | None] | None,
    speedup_weight: float,
    speedup_cap: float,
) -> list[TurnOutcome]:
    """Outcomes of unmasked turns: from the record when there is one, else derived from the score."""
    out = []
    for k, s in enumerate(scores):
        record = None if results is None else results[k]
        out.append(_from_score(s, speedup_weight, speedup_cap) if record is None else _from_result(record))
    return out


class _OutcomeShaper(RewardShaper):
    """Base of the shapers that read :class:`TurnOutcome`; holds the score parameters used to derive them."""

    uses_results = True

    def __init__(self, speedup_weight: float, speedup_cap: float) -> None:
        super().__init__()
        check_score_params(speedup_weight, speedup_cap)
        self.speedup_weight = float(speedup_weight)
        self.speedup_cap = float(speedup_cap)
        self._params = {"speedup_weight": self.speedup_weight, "speedup_cap": self.speedup_cap}

    def _outcomes(self, scores: list[float], results: list[EvalResult | None] | None) -> list[TurnOutcome]:
        return turn_outcomes(scores, results, self.speedup_weight, self.speedup_cap)


@register_shaper
class KevinShaper(_OutcomeShaper):
    """Kevin-32B's multi-turn reward (Cognition AI, "Kevin-32B: Multi-Turn RL for Writing CUDA Kernels", 2025).

    Per-turn score x_k = 0.3 * correct_k + speedup_k, with speedup 0 when incorrect (and 1.0, parity, when correct
    but untimed, as in s(c)). Turn reward r_k = sum_{t >= k} gamma^(t - k) x_t: each turn is credited with its own
    score and the discounted scores of the turns it led to. Not causal; every turn is trained with its own r_k
    (do not form returns-to-go again).

    Args:
        gamma: Discount over later turns, in [0, 1]; 0.4 is Kevin-32B's value.
        speedup_weight: lambda of the s(c) that produced the scores (used only to derive speedups from scores).
        speedup_cap: v_max of that s(c).
    """

    name = "kevin"
    causal = False

    def __init__(self, *, gamma: float = 0.4, speedup_weight: float = 0.5, speedup_cap: float = 2.0) -> None:
        super().__init__(speedup_weight, speedup_cap)
        self.gamma = check_param(self.name, "gamma", gamma, lo=0.0, hi=1.0)
        self._params = {"gamma": self.gamma, **self._params}

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        per_turn = []
        for o in self._outcomes(scores, results):
            speedup = (1.0 if o.speedup is None else o.speedup) if o.correct else 0.0
            per_turn.append(0.3 * float(o.correct) + speedup)
        rewards = [0.0] * len(per_turn)
        running = 0.0
        for k in range(len(per_turn) - 1, -1, -1):
            running = per_turn[k] + self.gamma * running
            rewards[k] = running
        return rewards


@register_shaper
class KernelGymShaper(_OutcomeShaper):
    """KernelGYM / Dr.Kernel per-turn reward: r_k = 0.5 * correct_k + 0.5 * [correct_k and speedup_k >= 1.01].

    The optional profiling-coverage term of KernelGYM is not included (musaenv reports coverage separately).
    Causal; every turn is trained. Pair it with :func:`musaenv.rewards.group.trloo_baselines`, Dr.Kernel's
    turn-level leave-one-out baseline.

    Args:
        speedup_weight: lambda of the s(c) that produced the scores (used only to derive speedups from scores).
        speedup_cap: v_max of that s(c).
    """

    name = "kernelgym"
    causal = True

    # KernelGYM counts a kernel as faster from 1.01x on.
    fast_threshold = 1.01

    def __init__(self, *, speedup_weight: float = 0.5, speedup_cap: float = 2.0) -> None:
        super().__init__(speedup_weight, speedup_cap)

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        rewards = []
        for o in self._outcomes(scores, results):
            fast = o.correct and o.speedup is not None and o.speedup >= self.fast_threshold
            rewards.append(0.5 * float(o.correct) + 0.5 * float(fast))
        return rewards


@register_shaper
class KernRLShaper(_OutcomeShaper):
    """OpenEnv kernrl per-turn reward.

    r = -0.5 on a build failure (format error, compile error; cheating too, musaenv's choice), -0.25 when the
    kernel ran but is not correct (runtime error, timeout, incorrect), and for a correct kernel with speedup v:
    0.5 * (v - 1) if v < 1, min(v - 1, 2) if v >= 1 (0 when untimed). Causal; every turn is trained.

    Without records, s = -1 reads as a build failure (s cannot tell a compile error from a runtime error or
    q = 0), -1 < s < 1 as incorrect, and slower correct kernels read as v = 1 (reward 0).

    Args:
        speedup_weight: lambda of the s(c) that produced the scores (used only to derive speedups from scores).
        speedup_cap: v_max of that s(c).
    """

    name = "kernrl"
    causal = True

    def __init__(self, *, speedup_weight: float = 0.5, speedup_cap: float = 2.0) -> None:
        super().__init__(speedup_weight, speedup_cap)

    @staticmethod
    def _reward(o: TurnOutcome) -> float:
        if o.correct:
            if o.speedup is None:
                return 0.0
            v = o.speedup
            return 0.5 * (v - 1.0) if v < 1.0 else min(v - 1.0, 2.0)
        return -0.5 if o.build_failed else -0.25

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        return [self._reward(o) for o in self._outcomes(scores, results)]
