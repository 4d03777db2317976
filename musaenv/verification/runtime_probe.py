"""Runtime verification, worker side: observe the candidate while it runs (imports torch; candidate worker only).

:class:`RuntimeGuard` is created before any candidate code is loaded, so the clocks, harness functions and global
settings it snapshots are the originals. It reports facts to the parent; :mod:`musaenv.verification.runtime`
judges them there. Everything here runs in the candidate's own process, so a candidate that can run arbitrary code
could also tamper with it; the static checks (introspection, monkeypatching, dynamic code) are the first line, these
probes the second (docs/verification.md says what each one can and cannot see).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["RuntimeGuard", "global_state", "profile_call", "thread_count", "watch_targets"]

# Bound at import, before any candidate code runs: replacing time.perf_counter_ns later does not reach these.
_PERF_NS = time.perf_counter_ns
_CPU_NS = time.process_time_ns
# One forward may use at most this many cores' worth of CPU time per configured thread (plus scheduler noise)
# before it counts as extra threads; only judged for calls longer than the floor (clock granularity, start-up).
_CORES_SLACK = 0.5
_CPU_FLOOR_NS = 2_000_000


def thread_count() -> int:
    """Threads of this process (``Threads:`` in ``/proc/self/status``; 0 when unreadable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def global_state() -> dict[str, Any]:
    """Process-wide settings that change speed or numerics (HACKS T9, S17)."""
    matmul = torch.backends.cuda.matmul
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "default_dtype": str(torch.get_default_dtype()),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda_matmul_allow_tf32": bool(matmul.allow_tf32),
        "cuda_matmul_fp16_reduction": bool(getattr(matmul, "allow_fp16_reduced_precision_reduction", False)),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


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


def profile_call(fn: Callable[[], Any], device: torch.device) -> tuple[Any, dict[str, Any]]:
    """Run ``fn`` under the autograd profiler (CPU; CUDA activity too on a CUDA device).

    Uses :class:`torch.autograd.profiler.profile` rather than :mod:`torch.profiler`, whose first use imports
    torch._dynamo and torch._inductor (8 s measured here); the events are the same dispatcher RecordFunctions.

    Returns:
        ``fn``'s result and a JSON-safe report (``ok``, ``wall_us``, ``ops``, ``other_ops``, ``device_total_us``).
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
    t0 = _PERF_NS()
    try:
        result = fn()
    finally:
        wall_us = (_PERF_NS() - t0) / 1e3
        prof.__exit__(None, None, None)
    try:
        report = {"ok": True, "wall_us": wall_us, **_summarise(list(prof.function_events))}
    except Exception as e:  # malformed event tree: report, do not guess
        report = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    return result, report


def watch_targets(extra: Mapping[str, tuple[str, Any, str]] | None = None) -> dict[str, tuple[str, Any, str]]:
    """Objects whose identity must not change during an evaluation: name -> (kind, owner, attribute).

    ``kind`` is ``timer`` (T4) or ``harness`` (S20); ``owner`` is a module, class or dict. ``extra`` adds the
    caller's own harness objects (the worker adds its functions, the timing module and the channel).
    """
    watch: dict[str, tuple[str, Any, str]] = {}
    for attr in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "process_time_ns"):
        watch[f"time.{attr}"] = ("timer", time, attr)
    for attr in ("synchronize", "Event"):
        watch[f"torch.cuda.{attr}"] = ("timer", torch.cuda, attr)
    for attr in ("clone", "copy_", "numpy", "cpu", "detach", "float", "contiguous", "data_ptr", "__eq__"):
        watch[f"torch.Tensor.{attr}"] = ("harness", torch.Tensor, attr)
    for attr in ("equal", "allclose", "no_grad"):
        watch[f"torch.{attr}"] = ("harness", torch, attr)
    for attr in ("ascontiguousarray", "array_equal"):
        watch[f"numpy.{attr}"] = ("harness", np, attr)
    watch.update(extra or {})
    return watch


def _lookup(owner: Any, attr: str) -> Any:
    return owner.get(attr) if isinstance(owner, Mapping) else getattr(owner, attr, None)


def _perturb(t: torch.Tensor, gen: torch.Generator) -> bool:
    """Overwrite ``t`` in place with values unrelated to its own; False when it cannot be written."""
    try:
        if t.is_floating_point():
            t.uniform_(3.0, 5.0, generator=gen)  # outside what any trial's check could accept by chance
        elif t.dtype == torch.bool:
            t.logical_not_()
        elif not t.is_complex():
            t.add_(1)
        else:
            return False
    except RuntimeError:  # overlapping (expanded) or read-only memory
        return False
    return True


class _Perturber:
    """Call hook that overwrites the results and tensor arguments of one extension call, restoring them later."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.hit = 0
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.gen = torch.Generator()
        self.gen.manual_seed(0x5EED)

    def __call__(self, count: int, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        if count != self.target:
            return
        seen: set[int] = set()
        for t in [*_tensors(result), *_tensors(list(args)), *_tensors(kwargs)]:
            if t.numel() == 0 or (t.data_ptr(), t.numel()) in seen:
                continue
            seen.add(id(t))
            backup = t.detach().clone()
            if _perturb(t.detach() if t.device.type == "cpu" else t.detach(), self.gen.device and self.gen):
                self.saved.append((t, backup))
                self.hit += 1

    def restore(self) -> None:
        with torch.no_grad():
            for t, backup in reversed(self.saved):
                t.detach().copy_(backup)
        self.saved.clear()
