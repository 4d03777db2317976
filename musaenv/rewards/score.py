"""Per-candidate score s(c): MusaCoder eq. 2. Pure Python, no torch.

With q the fraction of correctness trials passed and v the speedup over the PyTorch reference:

* s = -1 when extraction, compilation or execution fails, on a timeout, when a reward-hacking defence fires
  (``cheating``), or when q = 0;
* s = -0.5 + 0.5 q when 0 < q < 1 (stage ``incorrect``);
* s = 1 + lambda * min(max(v - 1, 0), v_max) when q = 1 and the stage is ``correct`` (v unknown: s = 1).

lambda (``speedup_weight``) and v_max (``speedup_cap``) are open in the paper; the defaults 0.5 and 2.0 come from
:class:`musaenv.config.RewardConfig`. ``infra_error`` (the harness failed) and ``compiled`` (built for a device that
is not present, so never run) have no score: :func:`candidate_score` returns ``None`` and shapers mask the turn.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from musaenv.config import RewardConfig
from musaenv.errors import ConfigError
from musaenv.types import EvalResult, Stage

__all__ = [
    "FAILED_STAGES",
    "FAIL_SCORE",
    "UNSCORED_STAGES",
    "candidate_score",
    "check_score_params",
    "score_from_config",
    "score_range",
    "scores_from_results",
    "speedup_from_score",
]

logger = logging.getLogger(__name__)

FAIL_SCORE = -1.0
"""Score of every failed candidate (MusaCoder eq. 2)."""

FAILED_STAGES: frozenset[Stage] = frozenset(
    {Stage.FORMAT_ERROR, Stage.COMPILE_ERROR, Stage.RUNTIME_ERROR, Stage.TIMEOUT, Stage.CHEATING}
)
"""Stages scored -1 whatever the trials say."""

UNSCORED_STAGES: frozenset[Stage] = frozenset({Stage.INFRA_ERROR, Stage.COMPILED})
"""Stages that get no score (``None``): the verdict says nothing about the policy."""


def check_score_params(speedup_weight: float, speedup_cap: float) -> None:
    """Raise :class:`ConfigError` unless lambda and v_max are finite and non-negative."""
    for name, value in (("speedup_weight", speedup_weight), ("speedup_cap", speedup_cap)):
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        if not ok:
            raise ConfigError(f"candidate score: expected {name} to be a finite number >= 0, found {value!r}.")


def _record_fields(result: EvalResult | Mapping[str, Any]) -> tuple[Stage, int, int, float | None]:
    """Return (stage, trials_passed, trials_total, speedup) of an EvalResult or of its ``to_dict()`` form."""
    if isinstance(result, EvalResult):
        return result.stage, result.trials_passed, result.trials_total, result.speedup
    if not isinstance(result, Mapping):
        raise ConfigError(f"candidate score: expected an EvalResult or a mapping, found {type(result).__name__}.")
    try:
        stage = Stage(result["stage"])
    except (KeyError, ValueError) as exc:
        known = [s.value for s in Stage]
        raise ConfigError(
            f"candidate score: expected a 'stage' key with one of {known}, found {result.get('stage')!r}."
        ) from exc
    passed = int(result.get("trials_passed") or 0)
    total = int(result.get("trials_total") or 0)
    raw = result.get("speedup")
    speedup = None if raw is None else float(raw)
    return stage, passed, total, speedup


def _correct_score(speedup: float | None, speedup_weight: float, speedup_cap: float) -> float:
    # A correct but untimed candidate (timing disabled, or NaN from a broken clock) is scored as parity: s = 1.
    if speedup is None or math.isnan(speedup):
        return 1.0
    return 1.0 + speedup_weight * min(max(speedup - 1.0, 0.0), speedup_cap)


def candidate_score(
    result: EvalResult | Mapping[str, Any],
    speedup_weight: float = 0.5,
    speedup_cap: float = 2.0,
) -> float | None:
    """Score one verified candidate with MusaCoder eq. 2.

    Args:
        result: An :class:`EvalResult`, or a mapping with its keys (``stage`` required; ``trials_passed``,
            ``trials_total`` and ``speedup`` read when present), e.g. ``EvalResult.to_dict()``.
        speedup_weight: lambda, the weight of the speedup bonus (>= 0).
        speedup_cap: v_max, the largest speedup excess ``v - 1`` that still earns a bonus (>= 0).

    Returns:
        s in [-1, 1 + lambda * v_max], or ``None`` for ``infra_error`` and ``compiled`` (no verdict on the policy).
        A ``correct`` stage with ``trials_total == 0`` is trusted (q taken as 1). An ``incorrect`` stage with q = 1
        (a later check such as a timed-output recheck failed) scores 0.0, the top of the partial range.

    Raises:
        ConfigError: The parameters are out of range or the record has no valid stage.
    """
    check_score_params(speedup_weight, speedup_cap)
    stage, passed, total, speedup = _record_fields(result)
    if stage in UNSCORED_STAGES:
        return None
    if stage in FAILED_STAGES:
        return FAIL_SCORE
    q = min(max(passed / total, 0.0), 1.0) if total > 0 else 0.0
    if stage is Stage.CORRECT:
        if total == 0 or passed >= total:
            return _correct_score(speedup, speedup_weight, speedup_cap)
        logger.warning("stage 'correct' with %d/%d trials passed: scored as incorrect", passed, total)
    if q <= 0.0:
        return FAIL_SCORE
    return -0.5 + 0.5 * q


def score_from_config(result: EvalResult | Mapping[str, Any], config: RewardConfig) -> float | None:
    """:func:`candidate_score` with lambda and v_max taken from a :class:`RewardConfig`."""
    return candidate_score(result, config.speedup_weight, config.speedup_cap)


def scores_from_results(
    results: Sequence[EvalResult | Mapping[str, Any]],
    speedup_weight: float = 0.5,
    speedup_cap: float = 2.0,
) -> list[float | None]:
    """Score every turn of an episode; ``None`` marks a masked (unscored) turn."""
    return [candidate_score(r, speedup_weight, speedup_cap) for r in results]


def score_range(speedup_weight: float = 0.5, speedup_cap: float = 2.0) -> tuple[float, float]:
    """Return (lowest, highest) possible score: (-1, 1 + lambda * v_max)."""
    check_score_params(speedup_weight, speedup_cap)
    return FAIL_SCORE, 1.0 + speedup_weight * speedup_cap


def speedup_from_score(score: float | None, speedup_weight: float = 0.5, speedup_cap: float = 2.0) -> float | None:
    """Recover the speedup a correct candidate's score implies, for shapers given scores but no results.

    s = 1 + lambda * min(max(v - 1, 0), v_max) is inverted as v = 1 + (s - 1) / lambda, clipped to
    [1, 1 + v_max]. The inversion loses information: a slower kernel (v < 1) reads as 1.0, and a score at the cap
    reads as 1 + v_max (a lower bound). The result is rounded to 1e-9 to remove float noise from the round trip.

    Returns:
        The implied speedup, or ``None`` when the score is ``None``, below 1 (not correct), or lambda is 0.
    """
    check_score_params(speedup_weight, speedup_cap)
    if score is None or score < 1.0 or speedup_weight == 0:
        return None
    excess = min((score - 1.0) / speedup_weight, speedup_cap)
    return round(1.0 + excess, 9)
