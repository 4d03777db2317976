"""Profile one forward in the candidate worker: outermost aten ops, their times, and ops hidden from the profiler.

Worker side (imports torch). :func:`profile_call` is what :class:`~musaenv.verification.runtime_probe.RuntimeGuard`
runs on the repeat of trial 1; :mod:`musaenv.verification.runtime` judges the report in the parent.

Kernel time (:mod:`musaenv.verification.coverage`): during that forward every call into the candidate's own kernels
runs inside :class:`KernelTime`, a profiler range (device time on CUDA) that also takes the thread's CPU time of
the call; the op-recording mode takes the CPU time of every aten op. CPU time, not the profiler's wall-clock
durations: on the shared 2-core development machines a 2 MB copy measured from 0.3 to 60 ms of wall time in one
profiled forward (the process was descheduled), which decided the coverage either way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from musaenv.isolation.reports import KernelTimes, OpTime, ProfileReport

__all__ = ["KernelTime", "profile_call"]

# Bound at import, before any candidate code runs.
_PERF_NS = time.perf_counter_ns
# The calling thread's CPU time: the process's is only as fine as the scheduler tick (4 ms) once a CPU-time limit is
# set (RLIMIT_CPU arms the process timer), and the worker has one. Intra-op threads (cpu_threads > 1) are not
# counted; the default is 1.
_CPU_NS = time.thread_time_ns
# The profiler range around each kernel call: the C++ range costs ~0.5 us a call and no dispatcher op (measured
# here; record_function costs ~8 us and shows up as profiler:: ops in the recording mode).
_RANGE: Callable[[str], Any] = getattr(torch._C._profiler, "_RecordFunctionFast", None) or (
    torch.autograd.profiler.record_function
)


def _ancestors(event: Any) -> Iterator[Any]:
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        yield parent
        parent = getattr(parent, "cpu_parent", None)


class _Summary(NamedTuple):
    ops: list[OpTime]
    other_ops: list[str]
    device_total_us: float | None
    kernel_device_us: float


def _summarise(events: Sequence[Any], span: str | None = None) -> _Summary:
    """Outermost aten ops (no aten ancestor: their children are implementation details) and other named ops.

    ``span`` names the range put around each kernel call (:class:`KernelTime`): the device time of the outermost
    such ranges is ``kernel_device_us``, and each aten op's device time inside one is kept apart (its
    ``kernel_device_us``) so that the parent can take torch compute the kernels called out of the kernels' time.
    """
    ops: dict[str, list[float]] = {}  # name -> [count, CPU us, device us, device us inside kernel calls]
    other: set[str] = set()
    device_total = kernel_device = 0.0
    for e in events:
        name = str(e.name)
        device_total += float(getattr(e, "self_device_time_total", 0.0) or 0.0)
        device_us = float(getattr(e, "device_time_total", 0.0) or 0.0)
        names = [str(a.name) for a in _ancestors(e)]
        if span is not None and name == span:
            kernel_device += 0.0 if span in names else device_us  # a kernel called back from a kernel: once
            continue
        if not name.startswith("aten::"):
            if "::" in name and not name.startswith(("profiler::", "prim::")):
                other.add(name)
            continue
        if any(n.startswith("aten::") for n in names):
            continue
        op = ops.setdefault(name, [0, 0.0, 0.0, 0.0])
        op[0] += 1
        op[1] += float(e.cpu_time_total)
        op[2] += device_us
        if span is not None and span in names:
            op[3] += device_us
    times = [OpTime(name, int(n), cpu, dev, inside) for name, (n, cpu, dev, inside) in ops.items()]
    return _Summary(times, sorted(other), device_total or None, kernel_device)


class _OpRecorder(TorchDispatchMode):
    """Names of the ops that reach the Python dispatch key, which ``at::RecordFunctionGuard`` does not switch off,
    and the thread CPU time of each (the outermost ones: the mode is off while an op it intercepted runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.cpu_ns: dict[str, list[int]] = {}  # name -> [CPU time, the part of it inside kernel calls]
        self.in_kernel = 0  # kernel calls in progress (KernelTime)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Recent torch wraps every mode's __torch_dispatch__ in torch._dynamo.disable, whose first call imports
        # torch._dynamo (2.6 s and ~900 modules measured here) in every fresh worker. Nothing is compiled here.
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func._schema.name)
        self.names.add(name)
        t0 = _CPU_NS()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            spent = self.cpu_ns.setdefault(name, [0, 0])
            took = _CPU_NS() - t0
            spent[0] += took
            spent[1] += took if self.in_kernel else 0

    def cpu_report(self) -> dict[str, list[float]]:
        """Op name -> [CPU us, CPU us inside kernel calls]."""
        return {name: [ns / 1e3 for ns in spent] for name, spent in sorted(self.cpu_ns.items())}


class KernelTime:
    """What each call into the candidate's kernels runs in during the profiled forward (``KernelCalls.span``).

    Args:
        name: The profiler range's name: unguessable, so that the candidate cannot open a range that reads as its
            kernels' (:class:`~musaenv.verification.runtime_probe.RuntimeGuard` draws it).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        self.cpu_ns = 0
        self.recorder: _OpRecorder | None = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        """One kernel call: a profiler range, and its thread CPU time unless it runs inside another kernel call."""
        rec = self.recorder
        outer = rec is None or not rec.in_kernel
        if rec is not None:
            rec.in_kernel += 1
        t0 = _CPU_NS()
        try:
            with _RANGE(self.name):
                yield
        finally:
            if outer:
                self.calls += 1
                self.cpu_ns += _CPU_NS() - t0
            if rec is not None:
                rec.in_kernel -= 1


def profile_call(
    fn: Callable[[], Any], device: torch.device, kernels: KernelTime | None = None
) -> tuple[Any, ProfileReport]:
    """Run ``fn`` under the autograd profiler (CPU; CUDA activity too on a CUDA device) and an op-recording mode.

    Uses :class:`torch.autograd.profiler.profile` rather than :mod:`torch.profiler`, whose first use imports
    torch._dynamo and torch._inductor (8 s measured here); the events are the same dispatcher RecordFunctions.
    A :class:`~torch.utils._python_dispatch.TorchDispatchMode` records op names as well: the profiler misses ops run
    under ``at::RecordFunctionGuard(false)``, the mode does not (neither sees kernels called past the dispatcher).

    Args:
        fn: The call to profile (one forward).
        device: The evaluation device.
        kernels: What the caller runs each kernel call in during ``fn`` (a fresh one per call of this function),
            or ``None`` when kernel calls are not timed.

    Returns:
        ``fn``'s result and its :class:`~musaenv.isolation.reports.ProfileReport` (``kernel``: calls, CPU time and
        device time inside the candidate's kernels, ``None`` without ``kernels``).
    """
    from torch.autograd import profiler

    kwargs: dict[str, Any] = {"use_kineto": True}
    if device.type == "cuda":
        kwargs["use_device"] = "cuda"
    try:
        prof = profiler.profile(**kwargs)
        prof.__enter__()
    except Exception as e:  # profiler busy (the candidate started one) or unsupported build
        return fn(), ProfileReport(ok=False, error=f"{type(e).__name__}: {e}")
    recorder = _OpRecorder()
    span = None if kernels is None else kernels.name
    if kernels is not None:
        kernels.recorder = recorder
    t0 = _PERF_NS()
    try:
        with recorder:
            result = fn()
    finally:
        wall_us = (_PERF_NS() - t0) / 1e3
        prof.__exit__(None, None, None)
    try:
        events = list(prof.function_events)
        summary = _summarise(events, span)
        kernel = None if kernels is None else KernelTimes(kernels.calls, kernels.cpu_ns / 1e3, summary.kernel_device_us)
        report = ProfileReport(
            ok=True,
            kernel=kernel,
            op_cpu_us=recorder.cpu_report(),
            ops=summary.ops,
            device_total_us=summary.device_total_us,
            wall_us=wall_us,
            other_ops=summary.other_ops,
            seen=sorted({str(e.name) for e in events} - {span}),
            dispatched=sorted(recorder.names),
        )
    except Exception as e:  # malformed event tree: report, do not guess
        report = ProfileReport(ok=False, error=f"{type(e).__name__}: {e}")
    return result, report
