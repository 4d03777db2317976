"""One :class:`~musaenv.evaluator.pool.EvaluatorPool` per (backend, eval config), shared by the adapters' envs.

Trainers that build their env classes themselves, with no arguments or from a config (SkyRL-gym's ``make``,
openenv-core's ``create_app(EnvClass, ...)``), make many instances at once; they share one pool of workers and one
build cache per setting instead of each starting its own.
"""

from __future__ import annotations

import json
import threading

from musaenv.config import EvalConfig
from musaenv.env import Evaluator

__all__ = ["close_shared_evaluators", "shared_evaluator"]

_pools: dict[str, Evaluator] = {}
_lock = threading.Lock()


def shared_evaluator(backend: str, eval_config: EvalConfig | None) -> Evaluator:
    """The pool for ``backend`` and ``eval_config``, created on first use (thread-safe)."""
    key = json.dumps([backend, eval_config.to_json() if eval_config else None])
    with _lock:
        if key not in _pools:
            from musaenv.evaluator.pool import EvaluatorPool

            _pools[key] = EvaluatorPool(backend, eval_config)
        return _pools[key]


def close_shared_evaluators() -> None:
    """Close every shared pool (e.g. at the end of training or when the server stops)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
