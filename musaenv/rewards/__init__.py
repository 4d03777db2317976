"""Rewards: the per-candidate score s(c) and the episode reward shapers. Pure Python, no torch.

Typical use::

    from musaenv.rewards import candidate_score, make_shaper

    scores = [candidate_score(r) for r in turn_results]  # None marks an infra error
    shaper = make_shaper("primeecho")                     # or shaper_from_config(env_config.reward)
    rewards = shaper.episode_rewards(scores, turn_results)
    weights = shaper.loss_weights(scores)

Shapers: ``primeecho`` (default), ``best``, ``last``, ``per_turn``, ``delta``, ``kevin``, ``tcpo``, ``kernelgym``,
``kernrl``; see ``docs/rewards.md`` for formulas and sources.
"""

from __future__ import annotations

from musaenv.rewards.base import (
    RewardShaper,
    available_shapers,
    make_shaper,
    register_shaper,
    shaper_from_config,
    shaper_kwargs,
)
from musaenv.rewards.external import KernelGymShaper, KernRLShaper, KevinShaper
from musaenv.rewards.group import all_failed, grpo_advantages, trloo_advantages, trloo_baselines, zero_advantage
from musaenv.rewards.score import (
    candidate_score,
    score_from_config,
    score_range,
    scores_from_results,
    speedup_from_score,
)
from musaenv.rewards.shapers import BestShaper, DeltaShaper, LastShaper, PerTurnShaper, PrimeEchoShaper
from musaenv.rewards.tcpo import TCPOShaper

__all__ = [
    "BestShaper",
    "DeltaShaper",
    "KernRLShaper",
    "KernelGymShaper",
    "KevinShaper",
    "LastShaper",
    "PerTurnShaper",
    "PrimeEchoShaper",
    "RewardShaper",
    "TCPOShaper",
    "all_failed",
    "available_shapers",
    "candidate_score",
    "grpo_advantages",
    "make_shaper",
    "register_shaper",
    "score_from_config",
    "score_range",
    "scores_from_results",
    "shaper_from_config",
    "shaper_kwargs",
    "speedup_from_score",
    "trloo_advantages",
    "trloo_baselines",
    "zero_advantage",
]
