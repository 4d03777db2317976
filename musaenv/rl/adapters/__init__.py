"""Adapters from KernelGen-v0 to other RL stacks; each imported on first use of one of its names.

* :class:`DiscreteKernelEnv` (:mod:`~musaenv.rl.adapters.sb3`): discrete actions over a per-task pool of
  candidate programs and a vector observation, for Stable-Baselines3 (PPO, A2C, DQN) and similar libraries.
* :class:`CandidatePool`, :func:`program_response`, :data:`PROGRAMS` (:mod:`~musaenv.rl.adapters.pool`): the
  built-in program variants (fast, slow, wrong, crash, cheat, prose) derived from the shipped solutions.
* :class:`CachingEvaluator` (:mod:`~musaenv.rl.adapters.eval_cache`): evaluate each (task, response, seed
  bucket) once with the real evaluator, replay it afterwards.
* :class:`KernelGenToolEnv`, :func:`make_trl_environment`, :func:`trl_reward_func`, :func:`trl_dataset_rows`
  (:mod:`~musaenv.rl.adapters.trl`): TRL's ``environment_factory`` contract (TRL itself is not needed).
* :class:`KernelGenClient`, :class:`KernelGenAction`, :func:`make_app` (:mod:`~musaenv.rl.adapters.openenv_app`):
  ``musaenv serve`` on openenv-core's server (WebSocket sessions) and its client (extra ``openenv``).
* :class:`KernelGenSkyRLEnv` (:mod:`~musaenv.rl.adapters.skyrl`): a SkyRL-gym ``BaseTextEnv``, registered as
  ``musaenv`` (extra ``skyrl``).
* :class:`KernelGenTaskset`, :class:`KernelGenVerifiersEnv` (:mod:`~musaenv.rl.adapters.verifiers_v1`): a
  verifiers 0.4 taskset with multi-turn feedback, loaded by verifiers as ``musaenv-kernelgen`` (extra ``verifiers``).
* :func:`serve`, :class:`OpenEnvSession` (:mod:`~musaenv.rl.adapters.openenv_server`): the dependency-free
  single-session HTTP server (``musaenv serve --stdlib``; no ``/ws``).

Example:
    >>> from musaenv.rl.adapters import DiscreteKernelEnv
    >>> env = DiscreteKernelEnv(tasks=["l1_relu"], backend="cpu")
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(0)   # the "fast" program
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PROGRAMS",
    "CachingEvaluator",
    "CandidatePool",
    "DiscreteKernelEnv",
    "KernelGenAction",
    "KernelGenClient",
    "KernelGenSkyRLEnv",
    "KernelGenTaskset",
    "KernelGenToolEnv",
    "KernelGenVerifiersEnv",
    "OpenEnvSession",
    "close_trl_environment",
    "make_app",
    "make_trl_environment",
    "program_response",
    "serve",
    "trl_dataset_rows",
    "trl_reward_func",
]

_LAZY = {
    "PROGRAMS": "musaenv.rl.adapters.pool",
    "CandidatePool": "musaenv.rl.adapters.pool",
    "program_response": "musaenv.rl.adapters.pool",
    "CachingEvaluator": "musaenv.rl.adapters.eval_cache",
    "DiscreteKernelEnv": "musaenv.rl.adapters.sb3",
    "KernelGenToolEnv": "musaenv.rl.adapters.trl",
    "close_trl_environment": "musaenv.rl.adapters.trl",
    "make_trl_environment": "musaenv.rl.adapters.trl",
    "trl_dataset_rows": "musaenv.rl.adapters.trl",
    "trl_reward_func": "musaenv.rl.adapters.trl",
    "OpenEnvSession": "musaenv.rl.adapters.openenv_server",
    "KernelGenAction": "musaenv.rl.adapters.openenv_app",
    "KernelGenClient": "musaenv.rl.adapters.openenv_app",
    "make_app": "musaenv.rl.adapters.openenv_app",
    "KernelGenSkyRLEnv": "musaenv.rl.adapters.skyrl",
    "KernelGenTaskset": "musaenv.rl.adapters.verifiers_v1",
    "KernelGenVerifiersEnv": "musaenv.rl.adapters.verifiers_v1",
    "serve": "musaenv.rl.adapters.openenv_server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'musaenv.rl.adapters' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
