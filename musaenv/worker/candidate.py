"""Worker process: ``python -m musaenv.worker.candidate --rfd R --wfd W --role candidate|reference``.

A *candidate* worker serves exactly one evaluation and exits: it enters the sandbox, executes the
candidate (whose ``load_inline`` calls are routed to the parent's build service), runs the correctness
trials and the timing, and sends outputs, never verdicts: the parent compares them with reference outputs
that never exist in this process. A *reference* worker (:mod:`musaenv.worker.reference`) runs trusted reference programs
only, for many requests, in a process no candidate has touched.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from musaenv.backends import get_backend
from musaenv.isolation.channel import Channel, ProtocolError
from musaenv.isolation.messages import (
    CandidateRequest,
    Failure,
    FailureStage,
    Go,
    Ready,
    Result,
    RunRequest,
    Stage,
)
from musaenv.isolation.reports import GpuPlan, PlanLayer, SandboxState
from musaenv.timing.timers import DeviceClock, clone_args
from musaenv.types import BuildRecord
from musaenv.verification.draw_watch import DrawWatch, refuse_audit_hooks
from musaenv.verification.runtime_probe import RuntimeGuard, thread_count, watch_targets
from musaenv.worker import harness
from musaenv.worker.compile_drive import drive_builds
from musaenv.worker.draw_reach import draw_watch
from musaenv.worker.failures import CandidateFailure, InputDrawError, format_exc
from musaenv.worker.harness import (
    DrawnInputs,
    ProgramModule,
    draw_inputs,
    find_aliasing,
    load_program,
    tensor_to_array,
    to_device,
)
from musaenv.worker.loader_hook import BuildFailedError, BuildState, WorkerHookError, install_loader_hook
from musaenv.worker.reference import serve_reference
from musaenv.worker.trials import configure_device, run_timing, run_trials


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe, unlike torch.equal)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def _check_outputs(outs: list[Any], inputs: list[Any], originals: list[Any]) -> list[str]:
    flags = []
    for o in outs:
        if type(o) is not torch.Tensor:  # exact type: subclasses and lazy objects are refused (HACKS T3)
            flags.append("output_not_tensor")
        elif o.layout != torch.strided or o.is_meta:
            flags.append("output_not_dense")
    dense = [o for o in outs if type(o) is torch.Tensor and o.layout == torch.strided and not o.is_meta]
    if find_aliasing(dense, inputs):  # a sparse or meta output has no data pointer: flagged above, not a crash
        flags.append("output_aliases_input")
    if any(isinstance(a, torch.Tensor) and not _same_bits(a, b) for a, b in zip(inputs, originals)):
        flags.append("input_mutation")  # the candidate wrote into its inputs (HACKS S10)
    return flags


def _runtime_extras(
    chan: Channel,
    req: RunRequest,
    program: ProgramModule,
    models: dict[int, Any],
    guard: RuntimeGuard,
    drawn: DrawnInputs,
) -> None:
    """Profiled and poisoned repeat of trial 1, perturbed run; sends the ``runtime`` report (docs/verification.md)."""
    first = req.trials[0]
    k = first.shape_index
    device = guard.device

    def make_args() -> list[Any]:
        program.apply_shape(req.shapes[k])
        return clone_args(to_device(drawn.trial_inputs(program, first), device))

    # the rewrite run: a later trial of the same shape, its values written into trial 1's own tensors
    later = next((i for i, t in enumerate(req.trials) if i > 0 and t.shape_index == k), None)

    def other_args() -> list[Any]:
        assert later is not None
        return clone_args(to_device(drawn.trial_inputs(program, req.trials[later]), device))

    rewrite = None if later is None else (later, other_args)
    report, arrays = guard.extra_runs(models[k], make_args, tensor_to_array, rewrite)
    if report is not None:  # something was checked
        chan.send(report.to_dict(), arrays)


def _enter_sandbox(req: CandidateRequest) -> SandboxState:
    try:
        from musaenv.isolation.sandbox import enter_sandbox
    except ImportError as e:  # sandbox module unavailable: say so, never pretend
        return SandboxState(missing=[f"sandbox unavailable: {e}"])
    # Triton on a GPU launches ptxas as a subprocess from the process that runs the kernel.
    allow_processes = req.allow_processes
    cfg = req.sandbox
    memory = _device_memory(req.device, cfg.device_memory_fraction)
    report = enter_sandbox(cfg, Path(req.workdir), block_processes=not allow_processes, block_exec=not allow_processes)
    out = SandboxState.from_dict({**report.to_dict(), "gpu_plan": None, "missing": []})  # checks the two agree
    if memory is not None:  # the GPU plan, layer by layer, as this worker got it (musaenv.isolation.gpu_plan)
        from musaenv.isolation.gpu_plan import gpu_plan

        landlock = report.enforced("landlock_writes")
        plan = gpu_plan(cfg.address_space_mb, req.workdir, report.writable_paths, landlock, not allow_processes,
                        cfg.max_processes)  # fmt: skip
        layers = [PlanLayer(layer.name, layer.ok, layer.detail) for layer in plan]
        out = dataclasses.replace(out, gpu_plan=GpuPlan(memory, layers))
    return out


def _device_memory(device: str, fraction: float) -> str | None:
    """On a GPU, bound torch's allocator before the sandbox (it creates the context); ``None`` on the CPU."""
    from musaenv.isolation.gpu_plan import is_gpu_device, limit_device_memory

    if not is_gpu_device(device):
        return None
    try:
        return limit_device_memory(device, fraction)
    except Exception as e:  # reported, never fatal here: the first device call then says what is wrong
        return f"device memory limit failed: {type(e).__name__}: {e}"


def _load_candidate(req: CandidateRequest, state: Any) -> Any:
    filename = str(Path(req.workdir) / "candidate.py")
    try:
        module = load_program(req.candidate, "candidate", filename)
    except BaseException as e:  # a candidate may raise anything, SystemExit included
        if state.failed:
            raise CandidateFailure("compile_error", state.failed[-1]) from None
        raise CandidateFailure("runtime_error", format_exc(e)) from None
    if state.failed:
        raise CandidateFailure("compile_error", state.failed[-1])
    cls = getattr(module, "ModelNew", None)
    if not isinstance(cls, type):
        raise CandidateFailure("format_error", "the candidate module defines no class ModelNew")
    return cls


def _wait_for_go(chan: Channel) -> None:
    msg, _ = chan.recv()
    if msg.get("type") != Go.TYPE:
        raise CandidateFailure("infra_error", f"expected the parent's go-ahead, got {msg.get('type')!r}")


def _watch() -> dict[str, tuple[str, Any, str]]:
    """Harness objects whose replacement is tampering: this module's functions, the harness, timers, channel."""
    from musaenv.isolation import messages
    from musaenv.timing import timers
    from musaenv.worker import trials

    watch: dict[str, tuple[str, Any, str]] = {}
    for prefix, g in (("worker", globals()), ("trials", vars(trials))):
        ours = {n for n, v in g.items() if callable(v) and str(getattr(v, "__module__", "")) in (__name__, "musaenv")}
        ours |= {n for n, v in g.items() if callable(v) and str(getattr(v, "__module__", "")).startswith("musaenv.")}
        watch.update({f"{prefix}.{n}": ("harness", g, n) for n in sorted(ours)})
    watch.update({f"harness.{n}": ("harness", harness, n) for n in harness.__all__})
    watch.update({f"timers.{n}": ("timer", timers, n) for n in (*timers.__all__, "time")})
    watch.update({f"DeviceClock.{n}": ("timer", DeviceClock, n) for n in ("sync", "events")})
    watch.update({f"Channel.{n}": ("harness", Channel, n) for n in ("send", "recv")})
    records = [c for c in vars(messages).values() if isinstance(c, type) and issubclass(c, messages.Message)]
    watch.update({f"messages.{c.__name__}.to_dict": ("harness", c, "to_dict") for c in records})
    watch["messages.fields"] = ("harness", messages, "fields")  # what to_dict reads the records with
    checks = ("check", "around", "_changed", "_narrow_changed")
    watch.update({f"DrawWatch.{n}": ("harness", DrawWatch, n) for n in checks})
    return watch_targets(watch)


def _trials_phase(
    chan: Channel,
    req: CandidateRequest,
    program: ProgramModule,
    model_cls: Any,
    state: Any,
    guard: RuntimeGuard,
    drawn: DrawnInputs,
) -> dict[int, Any]:
    try:
        models = run_trials(chan, req, program, model_cls, guard.device, _check_outputs, probe=guard, drawn=drawn)
    except InputDrawError as e:
        raise CandidateFailure("input_error", str(e)) from None
    except BuildFailedError:
        raise CandidateFailure("compile_error", state.failed[-1]) from None
    except BaseException as e:
        raise CandidateFailure("runtime_error", format_exc(e)) from None
    try:
        _runtime_extras(chan, req, program, models, guard, drawn)
    except BaseException as e:  # it passed the same input a moment ago
        raise CandidateFailure(
            "runtime_error", "while repeating trial 1 for the runtime checks:\n" + format_exc(e)
        ) from None
    return models


def _timing_phase(
    chan: Channel,
    req: CandidateRequest,
    program: ProgramModule,
    model: Any,
    guard: RuntimeGuard,
    drawn: DrawnInputs,
    draws: DrawWatch | None,
) -> None:
    chan.send(Stage("timing").to_dict())
    _wait_for_go(chan)  # timed runs hold the device alone (on the CPU only they do: see docs/scaling.md)
    guard.start_timing()
    t = req.timing
    assert t is not None
    around = draws.around if draws is not None else contextlib.nullcontext
    try:
        run, pool = run_timing(chan, req, program, model, guard.device, drawn, around_draw=around)
    except InputDrawError as e:
        raise CandidateFailure("input_error", str(e)) from None
    except BaseException as e:
        raise CandidateFailure("runtime_error", "while timing:\n" + format_exc(e)) from None
    try:
        timed_calls = t.warmup + len(run.samples_ms)
        again = guard.checks and not t.paired  # paired: the parent's clock decided each sample, nothing to re-measure
        report = guard.finish_timing(model, pool() if again else [], timed_calls, t.flush_bytes, t.repeats)
    except BaseException as e:
        raise CandidateFailure("runtime_error", "while timing:\n" + format_exc(e)) from None
    if draws is not None:  # every attribute, once: a patch of a name no draw of this task uses is named too
        draws.check("after the timed calls", full=True)
    if report is not None and draws is not None and draws.found:  # candidate code ran inside the harness's draws
        named = [*report.tampered.harness, *draws.found]
        report = dataclasses.replace(report, tampered=dataclasses.replace(report.tampered, harness=named))
    if report is not None:
        chan.send(report.to_dict())


def _worker_hook(spec: str) -> Callable[[BuildState, CandidateRequest], Any]:
    """The backend's worker hook, named ``module:function`` by its record (:class:`musaenv.backends.Backend`)."""
    module, _, name = spec.partition(":")
    hook: Callable[[BuildState, CandidateRequest], Any] = getattr(importlib.import_module(module), name)
    return hook


def _fail(chan: Channel, stage: str, log: str, builds: list[BuildRecord] | None = None) -> None:
    chan.send(Result(builds=builds or [], failure=Failure(FailureStage(stage), log)).to_dict())


def run_candidate(chan: Channel, req: CandidateRequest) -> None:
    """Evaluate one candidate and report outputs and timings to the parent."""
    try:
        device = configure_device(req)
    except RuntimeError as e:  # the device's runtime is missing here: the harness's problem, not the candidate's
        _fail(chan, "infra_error", str(e))
        return
    compile_only = req.compile_only
    gpu_draws = device.type == "cuda" and not compile_only
    try:  # the task's program, in the candidate's process only to draw inputs: its failure is the task's
        source = load_program(req.task_source, "reference_inputs", "<reference>")
        program = ProgramModule(source, device if gpu_draws else None, device=device)
    except BaseException as e:
        log = "the task's reference program failed to load (a problem of the task, not the candidate):\n"
        _fail(chan, "infra_error", log + format_exc(e))
        return
    state = install_loader_hook(chan, backend=req.backend, compile_only=compile_only)
    triton_run = None  # the backend's hook (cupy_hook, triton_hook): what it returns, the candidate loads inside
    if hook := get_backend(req.backend).worker_hook:
        try:
            triton_run = _worker_hook(hook)(state, req)
        except WorkerHookError as e:  # its runtime (CuPy, NVRTC) is missing in the worker: the machine's problem
            _fail(chan, "infra_error", str(e))
            return
    # Before any candidate code: the guard snapshots clocks, harness functions, settings and the thread count.
    guard = RuntimeGuard(req.runtime, device, state.calls, _watch())
    draws = draw_watch(program, req) if guard.checks and req.timing else None
    if draws is not None:
        refuse_audit_hooks()  # they would run at the harness's own audited events, after a draw
    sandbox = _enter_sandbox(req)
    chan.send(Stage("load", sandbox).to_dict())
    try:
        with triton_run.loading() if triton_run else contextlib.nullcontext():
            model_cls = _load_candidate(req, state)
        model_cls = triton_run.model_class(model_cls) if triton_run else model_cls
        if compile_only:  # nothing runs, so no input is drawn (except meta ones: shapes, no data)
            drive_builds(program, req, model_cls, state)
            chan.send(Result(builds=state.builds, compile_only=True).to_dict())
            return
        drawn = _draw_phase(chan, req, program, device)
        chan.send(Stage("trials").to_dict())
        _wait_for_go(chan)  # the parent grants the device (on GPUs for the whole run; builds still overlap)
        threads_before = thread_count()
        models = _trials_phase(chan, req, program, model_cls, state, guard, drawn)
        if req.timing:
            _timing_phase(chan, req, program, models[0], guard, drawn, draws)
        warnings = []
        if not guard.checks and thread_count() > threads_before + 1:
            warnings.append("thread_count_grew")  # with runtime checks on, the parent judges thread_started
        chan.send(Result(builds=state.builds, warnings=warnings).to_dict())
    except CandidateFailure as f:
        why = _needs_gpu(f, triton_run)
        _fail(chan, "needs_gpu" if why else f.stage, f"needs a GPU: {why}\n\n{f.log}" if why else f.log, state.builds)


def _needs_gpu(f: CandidateFailure, triton_run: Any) -> str | None:
    """On the CPU interpreter, a run-time failure that is the interpreter's limit (the exception the failure was
    raised while handling), not the candidate's."""
    if triton_run is None or triton_run.view is None or f.stage != "runtime_error" or f.__context__ is None:
        return None
    from musaenv.worker.triton_hook import needs_gpu_reason

    return needs_gpu_reason(f.__context__)


def _draw_phase(chan: Channel, req: CandidateRequest, program: ProgramModule, device: torch.device) -> DrawnInputs:
    """On the CPU, every input now: after the candidate's module-level builds (a candidate that does not build
    costs no draw), before the device slot (drawing overlaps other evaluations' timing). GPU tiers draw each input
    when it is needed, straight on the device. The ``draw`` stage has its own limit: a slow draw is the task's."""
    if device.type != "cpu":
        return DrawnInputs.nothing()
    chan.send(Stage("draw").to_dict())
    try:
        return draw_inputs(req, program)
    except Exception as e:
        raise CandidateFailure("input_error", f"drawing the task's inputs failed:\n{format_exc(e)}") from None


def serve(chan: Channel, role: str) -> int:
    """Run as a worker of ``role`` on ``chan``: say ready, then serve references or one candidate."""
    chan.send(Ready(pid=os.getpid(), torch=torch.__version__).to_dict())
    if role == "reference":
        serve_reference(chan)
        return 0
    try:
        msg, _ = chan.recv()
    except EOFError:
        return 0
    try:
        req = CandidateRequest.from_dict(msg)
    except ProtocolError as e:  # the parent's request: a harness fault, never the candidate's
        _fail(chan, "infra_error", f"malformed evaluation request: {e}")
        return 0
    run_candidate(chan, req)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the candidate's atexit handlers and finalizers


def main(argv: list[str] | None = None) -> int:
    """Entry point of a worker started by a fresh interpreter (see also :mod:`musaenv.isolation.forkserver`)."""
    p = argparse.ArgumentParser()
    p.add_argument("--rfd", type=int, required=True)
    p.add_argument("--wfd", type=int, required=True)
    p.add_argument("--role", choices=["candidate", "reference"], required=True)
    p.add_argument("--parent", type=int, default=0)
    a = p.parse_args(argv)
    if a.parent:  # a killed evaluator takes its workers along (a busy candidate would run on to RLIMIT_CPU)
        from musaenv.isolation.forkserver import tie_to_parent

        tie_to_parent(a.parent)
    return serve(Channel(a.rfd, a.wfd), a.role)


if __name__ == "__main__":
    sys.exit(main())
