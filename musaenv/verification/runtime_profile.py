"""Profile one forward in the candidate worker: outermost aten ops, their times, and ops hidden from the profiler.

Worker side (imports torch). :func:`profile_call` is what :class:`~musaenv.verification.runtime_probe.RuntimeGuard`
runs on the repeat of trial 1; :mod:`musaenv.verification.runtime` judges the report in the parent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["profile_call"]

_PERF_NS = time.perf_counter_ns  # bound at import, before any candidate code runs


def _ancestors(event: Any) -> Iterator[Any]:
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        yield parent
        parent = getattr(parent, "cpu_parent", None)


def _summarise(events: Sequence[Any]) -> dict[str, Any]:
    """Outermost aten ops (no aten ancestor: their children are implementation details) and other named ops."""
    ops: dict[str, dict[str, Any]] = {}
    other: set[str] = set()
    device_total = 0.0
    for e in events:
        name = str(e.name)
        device_total += float(getattr(e, "self_device_time_total", 0.0) or 0.0)
        if not name.startswith("aten::"):
            if "::" in name and not name.startswith(("profiler::", "prim::")):
                other.add(name)
            continue
        if any(str(a.name).startswith("aten::") for a in _ancestors(e)):
            continue
        op = ops.setdefault(name, {"name": name, "count": 0, "cpu_us": 0.0, "device_us": 0.0})
        op["count"] += 1
        op["cpu_us"] += float(e.cpu_time_total)
        op["device_us"] += float(getattr(e, "device_time_total", 0.0) or 0.0)
    return {"ops": list(ops.values()), "other_ops": sorted(other), "device_total_us": device_total or None}


class _OpRecorder(TorchDispatchMode):
    """Names of the ops that reach the Python dispatch key, which ``at::RecordFunctionGuard`` does not switch off."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Recent torch wraps every mode's __torch_dispatch__ in torch._dynamo.disable, whose first call imports
        # torch._dynamo (2.6 s and ~900 modules measured here) in every fresh worker. Nothing is compiled here.
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.add(str(func._schema.name))
        return func(*args, **(kwargs or {}))


def profile_call(fn: Callable[[], Any], device: torch.device) -> tuple[Any, dict[str, Any]]:
    """Run ``fn`` under the autograd profiler (CPU; CUDA activity too on a CUDA device) and an op-recording mode.

    Uses :class:`torch.autograd.profiler.profile` rather than :mod:`torch.profiler`, whose first use imports
    torch._dynamo and torch._inductor (8 s measured here); the events are the same dispatcher RecordFunctions.
    A :class:`~torch.utils._python_dispatch.TorchDispatchMode` records op names as well: the profiler misses ops run
    under ``at::RecordFunctionGuard(false)``, the mode does not (neither sees kernels called past the dispatcher).

    Returns:
        ``fn``'s result and a JSON-safe report (``ok``, ``wall_us``, ``ops``, ``other_ops``, ``device_total_us``,
        ``seen``: every event name, ``dispatched``: every op the mode saw).
    """
    from torch.autograd import profiler

    kwargs: dict[str, Any] = {"use_kineto": True}
    if device.type == "cuda":
        kwargs["use_device"] = "cuda"
    try:
        prof = profiler.profile(**kwargs)
        prof.__enter__()
    except Exception as e:  # profiler busy (the candidate started one) or unsupported build
        report: dict[str, Any] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        return fn(), report
    recorder = _OpRecorder()
    t0 = _PERF_NS()
    try:
        with recorder:
            result = fn()
    finally:
        wall_us = (_PERF_NS() - t0) / 1e3
        prof.__exit__(None, None, None)
    try:
        events = list(prof.function_events)
        report = {"ok": True, "wall_us": wall_us, **_summarise(events), "dispatched": sorted(recorder.names)}
        report["seen"] = sorted({str(e.name) for e in events})
    except Exception as e:  # malformed event tree: report, do not guess
        report = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    return result, report
