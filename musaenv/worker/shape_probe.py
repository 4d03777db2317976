"""Shape-probe worker: runs a reference program at candidate shapes for :mod:`musaenv.tasks.derive` (imports torch).

Started as ``python -m musaenv.worker.shape_probe`` by :class:`musaenv.tasks.probe.ProbeClient`; never imported
by the parent. One JSON request per line on stdin, one JSON reply per line on the original stdout (what the program
prints goes to stderr, so it cannot corrupt a reply). Requests:

* ``{"op": "load", "source": ...}``: execute a reference program (once; shapes are then set as the harness does).
* ``{"op": "check", "shape": {...}, "real": bool, "repeats": n, "limit_s": s, "max_real_bytes": b, "source": ...}``:
  build ``Model`` and draw ``get_inputs()`` on the ``meta`` device (no memory is allocated: shapes, bytes and a
  FLOP count come back), then, with ``real``, for real on the CPU, timing ``repeats`` forwards on one thread. With
  ``source`` that program is executed fresh for this check instead (the program as shown for the shape).

Both are records (:mod:`musaenv.isolation.probing`): a request is decoded strictly (a malformed one is answered as
a ``load`` error) and the reply is filled as the check measures, sent with what it did not measure left out.

An alarm on this process's CPU time interrupts a check after ``limit_s`` CPU seconds (Python-level loops such as
a meta-device LSTM stop at once; one long native call stops when it returns), so a busy host, which slows a check
without making it cost more, does not turn an accepted shape into a timeout; a check that hangs without using the
CPU is killed by the caller's wall-clock backstop. The address space is capped with ``RLIMIT_AS`` from the
command line, so a huge allocation fails inside this process, never in the caller.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from musaenv.isolation.probing import ProbeReply, ProbeRequest
from musaenv.worker.harness import ProgramModule, flatten_outputs, load_program

__all__ = ["main"]

_META_HINTS = ("meta", "data-dependent", "not implemented for", "NotImplementedError", "item()")


class _Timeout(Exception):
    pass


class _MetaSlow(Exception):
    """The meta-device forward took too long (e.g. a recurrent layer decomposed step by step in Python)."""


@contextmanager
def _cpu_alarm(limit_s: float) -> Iterator[None]:
    """Interrupt CPU-bound Python after ``limit_s`` of process CPU time (``ITIMER_VIRTUAL``, beside the wall alarm)."""

    def fire(signum: int, frame: Any) -> None:
        raise _MetaSlow(f"the meta-device forward took over {limit_s:g} s")

    old = signal.signal(signal.SIGVTALRM, fire)
    signal.setitimer(signal.ITIMER_VIRTUAL, max(0.001, limit_s))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)


@contextmanager
def _alarm(limit_s: float) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise _Timeout(f"took more than {limit_s:g} s of CPU time")

    old = signal.signal(signal.SIGPROF, fire)
    signal.setitimer(signal.ITIMER_PROF, max(0.001, limit_s))  # user + system CPU time of this process
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def _describe(values: list[Any]) -> tuple[list[list[Any]], int]:
    desc, total = [], 0
    for v in values:
        if isinstance(v, torch.Tensor):
            desc.append([list(v.shape), str(v.dtype).replace("torch.", "")])
            total += v.numel() * v.element_size()
        else:
            desc.append(["scalar", type(v).__name__])
    return desc, total


def _stage(name: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (_Timeout, _MetaSlow):
        raise
    except Exception as e:
        raise _StageError(name, e) from None


class _StageError(Exception):
    def __init__(self, stage: str, error: BaseException) -> None:
        self.stage, self.error = stage, error
        super().__init__(f"{stage}: {type(error).__name__}: {str(error)[:300]}")


def _meta_model(model_cls: Any, init: list[Any]) -> Any:
    """``model_cls(*init)`` on the meta device; built on the CPU and moved there when construction reads a value
    (Swin computes its drop-path rates with ``.item()``), which the meta device cannot give."""
    try:
        return model_cls(*init)
    except (RuntimeError, NotImplementedError) as e:
        if "meta" not in str(e):
            raise
    with torch.device("cpu"):
        return model_cls(*init).to("meta")


def _meta(program: ProgramModule, req: ProbeRequest, out: ProbeReply) -> None:
    """Build, draw and run on the meta device, filling ``out`` as it goes: sizes and bytes, nothing allocated."""
    program.apply_shape(req.shape)
    mod = program.module
    with torch.device("meta"), torch.no_grad():
        init = _stage("get_init_inputs", lambda: list(mod.get_init_inputs()))
        model = _stage("Model", lambda: _meta_model(mod.Model, init))
        state = [list(t.shape) for t in model.state_dict().values() if isinstance(t, torch.Tensor)]
        out.state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        inputs = _stage("get_inputs", lambda: list(mod.get_inputs()))
        out.inputs, out.input_bytes = _describe(inputs)
        out.state = state
        with FlopCounterMode(display=False) as counter, _cpu_alarm(req.meta_limit_s):
            result = _stage("forward", model, *inputs)
        out.outputs, out.output_bytes = _describe(flatten_outputs(result))
        out.flops = int(counter.get_total_flops())


def _real(program: ProgramModule, req: ProbeRequest, out: ProbeReply) -> None:
    """Build, draw and run for real on the CPU; the fastest of ``repeats`` forwards after one warm-up.

    Timed in CPU seconds of this thread (torch runs on one thread here), so a busy host, which delays the forward
    but does not make it cost more, does not change which shapes a file gets; wall time is reported beside it.
    ``out`` is filled only once the run succeeded.
    """
    mod = program.module
    model = _stage("Model", program.build_model, mod.Model, req.shape, 0, torch.device("cpu"))
    inputs = _stage("get_inputs", program.inputs, 1)
    times, walls = [], []
    with torch.no_grad():
        for _ in range(1 + max(1, req.repeats)):
            t0, w0 = time.thread_time(), time.perf_counter()
            result = _stage("forward", model, *inputs)
            times.append(time.thread_time() - t0)
            walls.append(time.perf_counter() - w0)
    outputs = flatten_outputs(result)
    for i, o in enumerate(outputs):
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel() and not torch.isfinite(o).any():
            raise _StageError("forward", ValueError(f"output {i} has no finite value"))
    out.outputs, out.output_bytes = _describe(outputs)
    out.forward_ms, out.forward_wall_ms = 1000.0 * min(times[1:]), 1000.0 * min(walls[1:])


def _looks_meta_only(e: _StageError) -> bool:
    text = f"{type(e.error).__name__}: {e.error}"
    return e.stage == "forward" and any(h in text for h in _META_HINTS)


def check(program: ProgramModule, req: ProbeRequest) -> ProbeReply:
    """One shape: meta first, then (if asked, and small enough) for real. Never raises for a bad shape."""
    reply = ProbeReply()
    try:
        with _alarm(req.limit_s):
            try:
                _meta(program, req, reply)
                reply.validated = "meta"
            except _MetaSlow as e:  # outputs unknown; a real run (when asked for, and small enough) measures them
                if not req.real:
                    return reply.failed(str(e), "meta_slow")
                reply.meta_unsupported = str(e)
            except _StageError as e:
                if not _looks_meta_only(e) or reply.input_bytes is None:
                    return reply.failed(str(e), "reject")
                reply.meta_unsupported = str(e)
            if req.real or reply.meta_unsupported is not None:
                if (reply.input_bytes or 0) + (reply.state_bytes or 0) > req.max_real_bytes:
                    return reply.failed("too large to run for real here", "too_large")
                _real(program, req, reply)
                reply.validated = "real"
    except _Timeout as e:
        return reply.failed(str(e), "timeout")
    except _StageError as e:
        return reply.failed(str(e), "reject")
    except MemoryError as e:
        return reply.failed(f"MemoryError: {e}", "memory")
    reply.ok = True
    return reply


def _load(source: str) -> ProgramModule:
    return ProgramModule(load_program(source, "reference", "<reference>"))


def _serve(proto: Any) -> None:
    program: ProgramModule | None = None
    for line in sys.stdin:
        try:
            req = ProbeRequest.read(json.loads(line))  # a malformed request is answered as a load error
            if req.op == "load":
                program = None
                program = _load(req.source)
                reply = ProbeReply(ok=True)
            elif req.source:
                reply = check(_load(req.source), req)
            elif program is None:
                reply = ProbeReply(error="no program loaded", kind="load")
            else:
                reply = check(program, req)
        except BaseException as e:  # the program's own import/exec errors; SystemExit from the file included
            reply = ProbeReply(error=f"{type(e).__name__}: {str(e)[:300]}", kind="load")
        proto.write(json.dumps(reply.wire()) + "\n")
        proto.flush()


def main() -> None:
    """Serve requests until stdin closes; ``argv[1]``: address-space limit in MiB (0: none)."""
    limit_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the program's prints go to stderr
    sys.stdout = sys.stderr
    torch.set_num_threads(1)
    if limit_mb:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, resource.getrlimit(resource.RLIMIT_AS)[1]))
    proto.write(json.dumps({"ok": True, "ready": True, "torch": torch.__version__}) + "\n")
    proto.flush()
    _serve(proto)


if __name__ == "__main__":
    main()
