"""Evaluators: run candidates in isolated workers and judge them.

* :class:`LocalEvaluator`: one machine, candidates one at a time (builds cached).
* :class:`EvaluatorPool`: one machine, builds in parallel, runs one at a time per device (MooreEval's split).
* :class:`RayEvaluator`: the same API on a Ray cluster (extra ``ray``).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EvaluatorPool", "LocalEvaluator", "RayEvaluator"]

_LAZY = {
    "LocalEvaluator": "musaenv.evaluator.local",
    "EvaluatorPool": "musaenv.evaluator.pool",
    "RayEvaluator": "musaenv.evaluator.ray_backend",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
