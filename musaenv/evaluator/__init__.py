"""Evaluators: run candidates in isolated workers and judge them (see :class:`LocalEvaluator`)."""

from __future__ import annotations

from typing import Any

__all__ = ["LocalEvaluator"]


def __getattr__(name: str) -> Any:
    if name == "LocalEvaluator":
        from musaenv.evaluator.local import LocalEvaluator

        return LocalEvaluator
    raise AttributeError(name)
