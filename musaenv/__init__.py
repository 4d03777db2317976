"""musaenv: GPU-kernel generation as a multi-turn reinforcement-learning environment.

``import musaenv`` registers ``KernelGen-v0`` (and its variants) with Gymnasium; it touches no device,
reads no environment variable and imports torch only when something that needs it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from musaenv.config import EnvConfig, EvalConfig, RewardConfig, SandboxConfig, TimingConfig
from musaenv.errors import MusaEnvError
from musaenv.registration import ENV_IDS, register_envs
from musaenv.types import EvalResult, Stage, TimingStats

if TYPE_CHECKING:
    from musaenv.env import KernelGenEnv
    from musaenv.evaluator.local import LocalEvaluator
    from musaenv.tasks.task import Task

__version__ = "0.1.0"

__all__ = [
    "ENV_IDS",
    "EnvConfig",
    "EvalConfig",
    "EvalResult",
    "KernelGenEnv",
    "LocalEvaluator",
    "MusaEnvError",
    "RewardConfig",
    "SandboxConfig",
    "Stage",
    "Task",
    "TimingConfig",
    "TimingStats",
    "__version__",
    "builtin_tasks",
    "get_task",
]

_LAZY = {
    "KernelGenEnv": "musaenv.env",
    "LocalEvaluator": "musaenv.evaluator.local",
    "Task": "musaenv.tasks.task",
    "builtin_tasks": "musaenv.tasks.builtin",
    "get_task": "musaenv.tasks.builtin",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'musaenv' has no attribute {name!r}")


register_envs()
