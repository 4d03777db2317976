"""Drive one candidate worker from the parent: serve its builds, enforce per-stage deadlines, collect data.

Size: the parent's side of one candidate run (builds served, stages, the paired-timing hand-off, outcomes) around
one state machine (_drive).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from musaenv.config import EvalConfig
from musaenv.evaluator.awake import Awake, awake_cores
from musaenv.evaluator.cpu_watch import CpuWatch, PhaseUsage, pin_threads, process_cpu_clock, timing_cpus
from musaenv.evaluator.memory import oom_kills
from musaenv.evaluator.pairing import Handoff, Pairer, PairingError, pair_calls
from musaenv.isolation.channel import GiveUp, ProtocolError, Stalled
from musaenv.isolation.limits import StageClock
from musaenv.isolation.messages import (
    BuildRequest,
    BuildResult,
    CandidateRequest,
    Go,
    Result,
    RuntimeReport,
    Stage,
    TimeDone,
    TimeReady,
    Timing,
    TimingReport,
    Trial,
    TrialsReport,
    decode,
)
from musaenv.isolation.plans import TimingPlan
from musaenv.isolation.process import WorkerProcess
from musaenv.isolation.reports import RuntimeReports, SandboxState
from musaenv.timing.paired import PairedSamples
from musaenv.toolchains.flags import check_spec_flags
from musaenv.toolchains.loader import BuildOutcome, BuildSpec, build_extension
from musaenv.types import BuildRecord

__all__ = ["CandidateRun", "drive_candidate"]


@dataclass
class CandidateRun:
    """What a candidate worker reported (or how it ended).

    Attributes:
        trials: Per-trial (arrays, dtypes, flags).
        timing: The timing message, if any, and its kept outputs.
        failure: (stage, log) when the candidate failed or the run was cut short.
        builds: One :class:`~musaenv.types.BuildRecord` per different build the parent served, in request
            order, then the CuPy kernels the worker compiled: the tier and times are the parent's, not the worker's
            word.
        compile_time_s: Seconds spent building (0 on cache hits).
        compile_only: True when the worker only compiled.
        warnings: Warning flags the worker raised.
        flags: Cheating flags raised while driving (protocol violations).
        sandbox: The sandbox report the worker sent.
        runtime: The worker's runtime-check reports, one per phase (docs/verification.md).
        runtime_arrays: Arrays of the ``trials`` report (repeat and perturbed-run outputs).
        cpu: CPU use of the trials and timing phases, read by the parent from ``/proc`` (:mod:`cpu_watch`).
        cpu_budget: Cores the worker may use (the reference's intra-op threads).
        paired: Paired timing's samples, taken by the parent's clock (:mod:`musaenv.evaluator.pairing`); the
            ``timing`` message's own samples are then only cross-checked against them.
        timing_layout: (warm-up calls, timing pool size) of the plan, set by the evaluator: which timed calls
            saw a new input (:func:`musaenv.evaluator.plan.first_use_calls`).
        refused_log: Why a build was refused before any compiler ran (flags outside the allow-list): the
            verdict is then ``format_error``, whatever the worker made of the refusal.
        answered: The build service's answer per build spec (keyed by the spec's JSON) in this run: a spec asked for
            again (a ``load_inline`` inside ``forward``) is answered from here, with no cache lookup or check of the
            module.
        binary_flags: Error flags of the built modules' imports (:mod:`musaenv.verification.binary_imports`): the
            verdict is then ``cheating``, whatever the worker made of the refused build.
        binary_messages: The findings behind them (and warnings), one line each.
        binary_warnings: Warning flags of the built modules' imports (library compute under a lenient policy).
        cores_awake: How the timing CPUs were kept out of halt while the CPU timing ran (:mod:`.awake`: ``"cpus"``,
            ``"global"`` or ``False``; ``None``: no CPU timing).
    """

    trials: list[tuple[list[np.ndarray], list[str], list[str]]] = field(default_factory=list)
    timing: tuple[Timing, list[np.ndarray]] | None = None
    failure: tuple[str, str] | None = None
    builds: list[BuildRecord] = field(default_factory=list)
    compile_time_s: float = 0.0
    compile_log: str = ""
    infra_log: str = ""
    compile_only: bool = False
    warnings: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    sandbox: SandboxState | None = None
    runtime: RuntimeReports = field(default_factory=RuntimeReports)
    runtime_arrays: list[np.ndarray] = field(default_factory=list)
    refused_log: str = ""
    answered: dict[str, BuildResult] = field(default_factory=dict)
    timing_layout: tuple[int, int] | None = None
    cpu: list[PhaseUsage] = field(default_factory=list)
    cpu_budget: int = 1
    binary_flags: list[str] = field(default_factory=list)
    binary_messages: list[str] = field(default_factory=list)
    binary_warnings: list[str] = field(default_factory=list)
    paired: PairedSamples | None = None
    cores_awake: Awake | None = None


# Stages in which no candidate verdict can be earned: "start" ends before the candidate's code runs, and "draw" only
# draws the task's inputs (a candidate's sabotage of drawing is told apart by the parent: see LocalEvaluator).
_HARNESS_STAGES = {"start": "infra_error", "draw": "input_error"}
_ORDER = ("start", "load", "draw", "trials", "timing")  # a worker's stages, each once, some skipped (no draw on GPUs)
MAX_BUILDS = 16  # different extensions one evaluation may build: their time is excluded from its limits
MAX_RECORDS = 4 * MAX_BUILDS  # build records kept per run: every build, and refused requests up to the rest
_LIMIT_POLL_S = 0.25  # how often a stage's limits are checked while its worker is silent


def _stage_timeouts(cfg: EvalConfig) -> dict[str, float]:
    return {
        "start": cfg.load_timeout_s,
        "load": cfg.load_timeout_s,
        "draw": cfg.run_timeout_s,
        "trials": cfg.run_timeout_s,
        "timing": cfg.timing_timeout_s,
    }


def _within(limit_s: float) -> GiveUp:
    """A ``give_up`` for :meth:`Channel.send`: ``"own"`` once ``limit_s`` seconds have passed from now."""
    end = time.monotonic() + limit_s
    return lambda: "own" if time.monotonic() > end else None


def _serve_build(
    worker: WorkerProcess,
    msg: BuildRequest,
    run: CandidateRun,
    cfg: EvalConfig,
    backend: str,
    compile_only: bool,
    reply_limit_s: float,
    binary_policy: str | None = None,
) -> float:
    """Build what the worker asked for; returns the seconds spent (excluded from its deadline).

    An answer waits for room in a full pipe (a worker flooding it with requests whose answers it never reads) at
    most ``reply_limit_s`` (the stage's limit); then :class:`Stalled` says ``own``: the worker's own time, spent not
    reading.
    """
    t0 = time.monotonic()
    send = partial(worker.chan.send, give_up=_within(reply_limit_s))
    try:
        spec = BuildSpec.from_dict(msg.spec)
        spec = BuildSpec.from_dict({**spec.to_dict(), "backend": backend, "compile_only": compile_only})
    except (KeyError, TypeError, ValueError) as e:
        _note(run, BuildRecord("", False, time.monotonic() - t0, False))
        send(BuildResult(ok=False, name="", log=f"malformed build request: {e}").to_dict())
        return time.monotonic() - t0
    problems = check_spec_flags(spec.extra_cflags, spec.extra_cuda_cflags, spec.extra_ldflags, spec.extra_include_paths)
    if problems:  # checked here, in the parent, whatever the static checks recovered: no compiler runs at all
        run.refused_log = "\n".join(p.message() for p in problems)
        _note(run, BuildRecord(spec.name, False, time.monotonic() - t0, False))
        send(BuildResult(ok=False, name=spec.name, log=run.refused_log).to_dict())
        return time.monotonic() - t0
    key = json.dumps(spec.to_dict(), sort_keys=True)
    answer = run.answered.get(key)
    if answer is None and len(run.answered) >= MAX_BUILDS:
        run.compile_log = (
            f"refused: more than {MAX_BUILDS} different extensions in one evaluation (each build's time is the "
            "harness's, not the candidate's, so their number is bounded)"
        )
        answer = BuildResult(ok=False, name=spec.name, log=run.compile_log)
        _note(run, BuildRecord(spec.name, False, time.monotonic() - t0, False))
    elif answer is None:
        outcome = build_extension(spec, timeout_s=cfg.compile_timeout_s)
        if not outcome.cached:
            run.compile_time_s += outcome.seconds
        if outcome.ok and outcome.so_path and binary_policy is not None:
            outcome = _judge_binary(outcome, binary_policy, run)
        if not outcome.ok:
            run.compile_log = outcome.log
            if outcome.infra_error:
                run.infra_log = outcome.log
        answer = run.answered[key] = outcome
        _note(run, _record(outcome))
    send(answer.to_dict())
    return time.monotonic() - t0


def _note(run: CandidateRun, record: BuildRecord) -> None:
    """Keep one build record, up to :data:`MAX_RECORDS` (a worker flooding refused requests grows no list here)."""
    if len(run.builds) < MAX_RECORDS:
        run.builds.append(record)


def _record(outcome: BuildOutcome) -> BuildRecord:
    """The build record of one served build: its tier and the faster paths that did not apply, as the build
    service reported them (:mod:`musaenv.toolchains.loader`)."""
    tier, declined = outcome.extra.get("tier"), outcome.extra.get("declined") or []
    return BuildRecord(outcome.name, outcome.ok, outcome.seconds, outcome.cached,
                       tier=tier if isinstance(tier, str) and tier else None,
                       declined=tuple(d for d in declined if isinstance(d, dict)))  # fmt: skip


def _judge_binary(outcome: BuildOutcome, policy: str, run: CandidateRun) -> BuildOutcome:
    """``outcome`` judged by the symbols its module imports; a module with error findings is never handed to the
    worker (it gets a failed build) and the run's verdict is ``cheating`` (:attr:`CandidateRun.binary_flags`)."""
    from pathlib import Path

    from musaenv.verification.binary_imports import binary_findings

    try:
        findings = binary_findings(Path(str(outcome.so_path)), policy)
    except OSError as e:  # binutils missing or the module gone: the harness cannot judge it, never the candidate
        why = f"the built module's imports could not be read ({e})"
        return dataclasses.replace(outcome, ok=False, so_path=None, log=why, infra_error=True)
    run.binary_messages += [f"{f.severity}: {f.message}" for f in findings]
    run.binary_warnings += [f.flag for f in findings if not f.is_error and f.flag not in run.binary_warnings]
    errors = [f for f in findings if f.is_error]
    if not errors:
        return outcome
    run.binary_flags += [f.flag for f in errors if f.flag not in run.binary_flags]
    why = "refused: " + "; ".join(f"{f.flag}: {f.message}" for f in errors)
    return dataclasses.replace(outcome, ok=False, so_path=None, log=why)


def _handle(msg: Trial | Timing | RuntimeReport | Result, arrays: list[np.ndarray], run: CandidateRun) -> bool:
    """Record a data message; True when the run is over."""
    if isinstance(msg, Trial):
        run.trials.append((arrays, msg.dtypes, msg.flags))
    elif isinstance(msg, Timing):
        run.timing = (msg, arrays)
    elif isinstance(msg, RuntimeReport):
        run.runtime = run.runtime.add(msg)  # one report per phase
        if isinstance(msg, TrialsReport):
            run.runtime_arrays = arrays
    else:
        # CuPy kernels are compiled in the worker (musaenv.worker.cupy_hook), not by the parent's build service: only
        # those records are the worker's; the parent recorded the builds it served itself (_serve_build).
        cupy = [b for b in msg.builds if b.kind == "cupy"]
        run.builds += cupy
        run.compile_time_s += sum(b.seconds for b in cupy)
        run.warnings = list(msg.warnings)
        run.compile_only = msg.compile_only
        if msg.failure is not None:
            run.failure = (msg.failure.stage.value, msg.failure.log)
        return True
    return False


def drive_candidate(
    worker: WorkerProcess,
    request: CandidateRequest,
    cfg: EvalConfig,
    backend: str,
    compile_only: bool,
    device_slot: AbstractContextManager[Any] | None = None,
    binary_policy: str | None = None,
    pairer: Pairer | None = None,
    memory_slot: AbstractContextManager[Any] | None = None,
) -> CandidateRun:
    """Send ``request`` to a ready candidate worker and follow it to the end (or kill it).

    ``device_slot`` is held from the start of the correctness trials (on the CPU: of the timing) to the end of the
    run, so evaluations that share a device never time at the same time (on a GPU: never run at the same time),
    while their builds, input drawing and (on the CPU) correctness trials overlap. ``pairer`` starts the
    reference's side of paired timing (the request's timing plan then says ``paired``); it is called once the
    device slot is held, and the parent then times both workers call by call (:mod:`musaenv.evaluator.pairing`).
    ``memory_slot`` (a machine-wide run admission by memory, :mod:`musaenv.toolchains.admission`) is taken before the
    device slot, at the first of the trials or the timing, while the worker waits for its go-ahead (not its time).
    """
    with ExitStack() as stack:
        slot = device_slot or nullcontext()
        return _drive(worker, request, cfg, backend, compile_only, slot, stack, binary_policy, pairer, memory_slot)


def _pair(
    worker: WorkerProcess,
    run: CandidateRun,
    clock: StageClock,
    pairer: Pairer,
    serve: Callable[[BuildRequest], float],
    timing: TimingPlan,
    cpu_clock: bool,
) -> Handoff | None:
    """Paired timing of the candidate (``worker``) with the reference; returns what ended the candidate's part
    early, if anything (handled by the caller as if just received). A build asked for meanwhile is served.
    ``cpu_clock``: samples are the workers' CPU time (the CPU backend), else the parent's wall clock."""

    def recv() -> TimeReady | TimeDone | Handoff:
        while True:
            got = _recv_within(worker, clock)
            if isinstance(got, str):
                return got
            kind = got[0].get("type")
            if kind == BuildRequest.TYPE:
                clock.exclude(serve(BuildRequest.from_dict(got[0])))
            elif kind in (TimeReady.TYPE, TimeDone.TYPE):
                msg = decode(got[0], TimeReady, TimeDone)
                assert isinstance(msg, (TimeReady, TimeDone))
                return msg
            else:
                return got

    cpu = process_cpu_clock(worker.pid) if cpu_clock else None
    t0 = time.monotonic()
    ref = pairer.start()
    clock.exclude(time.monotonic() - t0)  # the reference's start, its calls and its report: not the candidate's time
    paired, handoff = pair_calls(recv, partial(worker.chan.send, give_up=clock.over), ref, timing, cpu, clock.exclude)
    run.paired = dataclasses.replace(paired, threads=run.cpu_budget)
    return handoff


def _recv_within(worker: WorkerProcess, clock: StageClock) -> tuple[dict[str, Any], list[np.ndarray]] | str:
    """The worker's next message, or which limit of ``clock`` ran out first (see :meth:`StageClock.over`)."""
    while True:
        try:
            got = worker.chan.recv_before(time.monotonic() + _LIMIT_POLL_S, clock.over)
        except Stalled as e:  # stopped inside a message: the limit that ran out meanwhile
            return e.reason
        if got is not None:
            return got
        over = clock.over()
        if over is not None:
            return over


def _oom_killed(worker: WorkerProcess, before: int | None) -> bool:
    """True when the worker died of SIGKILL while the kernel's OOM killer was killing (``/proc/vmstat``)."""
    after = oom_kills()
    return worker.poll() == -signal.SIGKILL and before is not None and after is not None and after > before


def _ran_out(worker: WorkerProcess, run: CandidateRun, clock: StageClock, phase: str, why: str) -> CandidateRun:
    """End ``run`` at the limit ``why`` of ``clock`` (see :meth:`StageClock.over`): the worker is killed.

    Before the candidate's code runs the time is the harness's; a slow draw of the task's inputs is the task's unless
    the reference process cannot reproduce it (LocalEvaluator checks). A stage that only ran past the wall-clock
    backstop was starved by the host: infra_error, retried.
    """
    worker.kill()
    stage = "infra_error" if why == "backstop" else _HARNESS_STAGES.get(phase, "timeout")
    run.failure = (stage, clock.describe(phase, why))
    return run


# size: ~100 lines, kept whole: one loop over the worker's messages whose branches all update its state (phase,
# the device slot held, the stage clock, paired timing); split, that state would be passed around or hidden.
def _drive(
    worker: WorkerProcess,
    request: CandidateRequest,
    cfg: EvalConfig,
    backend: str,
    compile_only: bool,
    device_slot: AbstractContextManager[Any],
    stack: ExitStack,
    binary_policy: str | None = None,
    pairer: Pairer | None = None,
    memory_slot: AbstractContextManager[Any] | None = None,
) -> CandidateRun:
    run = CandidateRun(cpu_budget=max(1, request.cpu_threads or 1))
    watch = CpuWatch(worker.pid)
    run.cpu = watch.phases
    timeouts = _stage_timeouts(cfg)
    untimed_free = request.device == "cpu"  # untimed CPU work runs beside other evaluations' timing
    held = False
    phase = "start"
    oom_before = oom_kills()  # a SIGKILL while this rises is the host's OOM killer, not the candidate
    clock = StageClock(worker.pid, timeouts[phase])
    try:
        worker.chan.send(request.to_dict(), give_up=clock.over)
    except Stalled as e:  # a worker that does not take its request (stopped before it reads)
        return _ran_out(worker, run, clock, phase, e.reason)
    except OSError as e:  # the worker died before its request (killed, or its spare's server was): not the candidate
        run.failure = (
            "infra_error",
            f"the worker was gone before its request was sent ({e}); {worker.exit_description()}",
        )
        return run
    handoff: Handoff | None = None
    while True:
        try:
            got, handoff = (handoff if handoff is not None else _recv_within(worker, clock)), None
            if isinstance(got, str):
                return _ran_out(worker, run, clock, phase, got)
            msg = decode(got[0], BuildRequest, Stage, Trial, Timing, TrialsReport, TimingReport, Result)
            arrays = got[1]
            if isinstance(msg, BuildRequest):
                served = _serve_build(worker, msg, run, cfg, backend, compile_only, timeouts[phase], binary_policy)
                clock.exclude(served)
            elif isinstance(msg, Stage):
                if msg.name not in timeouts:
                    raise ProtocolError(f"unknown stage {msg.name!r}")
                if _ORDER.index(msg.name) <= _ORDER.index(phase):  # each restarts the clock: only once, in order
                    raise ProtocolError(f"stage {msg.name!r} after stage {phase!r}")
                phase = msg.name
                watch.stop()
                if phase in ("trials", "timing"):
                    if memory_slot is not None:  # admitted by memory first (never while holding the device)
                        stack.enter_context(memory_slot)
                        memory_slot = None
                    # The slot is taken once and kept: at the trials on a GPU, at the timing on the CPU.
                    if not held and (phase == "timing" or not untimed_free):
                        stack.enter_context(device_slot)
                        held = True
                    if phase == "timing":  # extra threads buy no extra cores (cpu_watch.pin_threads)
                        cpus = timing_cpus(run.cpu_budget)
                        pin_threads(worker.pid, cpus)
                        if untimed_free:  # CPU time: no timing core halts between calls (musaenv.evaluator.awake)
                            run.cores_awake = stack.enter_context(awake_cores(cpus))
                    watch.start(phase)
                    worker.chan.send(Go().to_dict(), give_up=clock.over)
                    if phase == "trials" and pairer is not None:
                        pairer.ahead()  # the reference's warm-up on the untimed cores, beside these trials
                clock.restart(timeouts[phase])
                if phase == "timing" and pairer is not None and request.timing:
                    serve = partial(_serve_build, worker, run=run, cfg=cfg, backend=backend,
                                    compile_only=compile_only, reply_limit_s=timeouts[phase],
                                    binary_policy=binary_policy)  # fmt: skip
                    handoff = _pair(worker, run, clock, pairer, serve, request.timing, untimed_free)
                if msg.sandbox is not None:
                    run.sandbox = msg.sandbox
                    # Without the seccomp rule that refuses self-sent stop signals, a stop may be the candidate's.
                    clock.stops_are_own = "seccomp_signals" not in msg.sandbox.applied
            else:
                if isinstance(msg, (Timing, Result)) or (isinstance(msg, RuntimeReport) and phase == "trials"):
                    watch.stop()  # the phase's data is here: what follows is the harness's, not the phase's
                assert isinstance(msg, (Trial, Timing, RuntimeReport, Result))  # what decode allows
                if _handle(msg, arrays, run):
                    return run
        except Stalled as e:  # its pipe stayed full (it sends messages without reading the answers) past a limit
            return _ran_out(worker, run, clock, phase, e.reason)
        except PairingError as e:  # the reference's side of paired timing: the harness's fault, retried
            worker.kill()
            run.failure = ("infra_error", str(e))
            return run
        except (EOFError, BrokenPipeError, ConnectionResetError):  # the worker is gone (a send can find out first)
            desc = worker.exit_description()
            tail = worker.log_tail()
            stage = "infra_error" if phase == "start" else "runtime_error"  # "start": before the candidate's code
            if worker.server_died:  # it died with its fork server (killed from outside): a harness part, retried
                stage, desc = "infra_error", f"{desc} (its fork server had ended)"
            elif _oom_killed(worker, oom_before):  # the host ran out of memory: retried, never the candidate's
                stage, desc = "infra_error", f"{desc}: the kernel's OOM killer ended processes meanwhile (host memory)"
            run.failure = (stage, f"{desc} during the {phase} stage" + (f"\n{tail}" if tail else ""))
            return run
        except (ProtocolError, KeyError, TypeError, ValueError) as e:
            worker.kill()
            run.flags.append("protocol_violation")
            run.failure = (
                "cheating",
                f"the worker's channel carried a malformed message ({e}); "
                "candidate code must not write to the harness's pipes",
            )
            return run
