"""Group baselines for G rollouts of one prompt: GRPO advantages, TRLOO turn baselines. Pure Python, no torch."""

from __future__ import annotations

import math
from collections.abc import Sequence

from musaenv.errors import ConfigError
from musaenv.rewards.base import check_scores

__all__ = ["all_failed", "grpo_advantages", "trloo_advantages", "trloo_baselines", "zero_advantage"]


def _finite(values: Sequence[float], what: str) -> list[float]:
    out = []
    for k, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{what}: expected finite numbers, item {k} is {v!r}.")
        out.append(float(v))
    return out


def zero_advantage(returns: Sequence[float], tol: float = 1e-9) -> bool:
    """True when the group carries no learning signal: every return within ``tol`` of the others.

    A group of one (or none) has no signal either.
    """
    xs = _finite(returns, "zero_advantage")
    if tol < 0:
        raise ConfigError(f"zero_advantage: expected tol >= 0, found {tol!r}.")
    return len(xs) < 2 or max(xs) - min(xs) <= tol


def all_failed(groups: Sequence[Sequence[float | None]], success_threshold: float = 1.0) -> bool:
    """True when no episode of the group has a turn with score >= ``success_threshold`` (masked turns ignored).

    One reading of MusaCoder's Buffered Dynamic Retry trigger ("every rollout of the prompt failed"), which the
    paper leaves open.
    """
    return not any(s is not None and s >= success_threshold for g in groups for s in check_scores(g))


def grpo_advantages(returns: Sequence[float], eps: float = 1e-6, scale: bool = True) -> list[float]:
    """Group-normalised advantages (R_i - mean) / (std + eps) (GRPO, DeepSeekMath arXiv 2402.03300).

    std is the sample standard deviation (ddof = 1), as TRL's and verl's GRPO compute it. With ``scale=False`` the
    division is skipped (Dr. GRPO, arXiv 2503.20783). A group with no signal (:func:`zero_advantage` with
    tol = 0, including a group of one) gets all zeros.
    """
    xs = _finite(returns, "grpo_advantages")
    if not (eps >= 0 and math.isfinite(eps)):
        raise ConfigError(f"grpo_advantages: expected a finite eps >= 0, found {eps!r}.")
    if zero_advantage(xs, tol=0.0):
        return [0.0] * len(xs)
    mean = math.fsum(xs) / len(xs)
    centred = [x - mean for x in xs]
    if not scale:
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / (len(xs) - 1))
    return [c / (std + eps) for c in centred]


def trloo_baselines(group_turn_rewards: Sequence[Sequence[float | None]]) -> list[list[float | None]]:
    """Turn-level leave-one-out baselines (TRLOO, KernelGYM / Dr.Kernel).

    For episode i and turn k the baseline is the mean of the other episodes' turn-k values among those that
    reached turn k. Pass per-turn rewards, or per-turn returns-to-go if the trainer credits those.

    Args:
        group_turn_rewards: G episodes, each a list of per-turn values; ``None`` marks a masked turn, which
            neither gets a baseline nor enters the others'.

    Returns:
        Same shape; ``None`` where the turn is masked or no other episode has an unmasked value at that turn.
    """
    groups = [check_scores(g) for g in group_turn_rewards]
    out: list[list[float | None]] = []
    for i, episode in enumerate(groups):
        row: list[float | None] = []
        for k, value in enumerate(episode):
            others = [g[k] for j, g in enumerate(groups) if j != i and len(g) > k and g[k] is not None]
            peers = [v for v in others if v is not None]
            row.append(math.fsum(peers) / len(peers) if value is not None and peers else None)
        out.append(row)
    return out


def trloo_advantages(group_turn_rewards: Sequence[Sequence[float | None]]) -> list[list[float]]:
    """Per-turn advantages value - TRLOO baseline; 0 where :func:`trloo_baselines` gives ``None``."""
    groups = [check_scores(g) for g in group_turn_rewards]
    out = []
    for episode, baselines in zip(groups, trloo_baselines(groups), strict=True):
        out.append([0.0 if v is None or b is None else v - b for v, b in zip(episode, baselines, strict=True)])
    return out
