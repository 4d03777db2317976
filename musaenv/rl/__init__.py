"""Policy-optimizer plugins: the protocol, rollouts, MirrorPop, Buffered Dynamic Retry and a reference GRPO trainer.

Light parts (records, protocols, filters, buffers, rollouts) are imported eagerly; the torch-based trainer and the
tiny model builder are imported on first use of their names.

Example:
    >>> import gymnasium as gym, musaenv
    >>> from musaenv.rl import GRPOConfig, GRPOTrainer, EpisodeBatch, build_tiny_lm, collect_groups
    >>> model, tok = build_tiny_lm()
    >>> trainer = GRPOTrainer(model, tok, GRPOConfig(max_new_tokens=256))
    >>> env = gym.make("KernelGen-v0", task="L1_relu", backend="cpu")
    >>> groups = collect_groups(env, trainer, ["L1_relu"], group_size=4, seed=0)
    >>> metrics = trainer.update(EpisodeBatch(tuple(groups)))
"""

from __future__ import annotations

import importlib
from typing import Any

from musaenv.rl.bdr import BufferedDynamicRetry, RetryItem, TaskRequest, all_failed
from musaenv.rl.mirrorpop import DEFAULT_DELTA, FilterResult, mirrorpop_filter
from musaenv.rl.protocol import (
    Episode,
    EpisodeBatch,
    EpisodeGroup,
    Generation,
    Optimizer,
    Policy,
    Prompt,
    Turn,
)
from musaenv.rl.rollout import collect_groups, run_episode

__all__ = [
    "DEFAULT_DELTA",
    "BufferedDynamicRetry",
    "Episode",
    "EpisodeBatch",
    "EpisodeGroup",
    "FilterResult",
    "GRPOConfig",
    "GRPOTrainer",
    "Generation",
    "Optimizer",
    "Policy",
    "Prompt",
    "RetryItem",
    "TaskRequest",
    "Turn",
    "all_failed",
    "build_tiny_lm",
    "collect_groups",
    "mirrorpop_filter",
    "run_episode",
]

_LAZY = {
    "GRPOConfig": "musaenv.rl.grpo_config",
    "GRPOTrainer": "musaenv.rl.grpo",
    "build_tiny_lm": "musaenv.rl.tiny_lm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'musaenv.rl' has no attribute {name!r}")
