"""The runtime probe's reports: one record per phase, sent by the candidate worker, judged by the parent.

The worker (:class:`musaenv.verification.runtime_probe.RuntimeGuard`) builds a :class:`TrialsReport` after the
correctness trials and a :class:`TimingReport` after the timing; the parent decodes them strictly on receipt (a
report with an unknown, a missing or a mistyped field is a :class:`~musaenv.isolation.records.ProtocolError`, so a
``protocol_violation``, before anything reads it) and :func:`musaenv.verification.runtime.assess_runtime` judges
the typed fields. The profiled forward (:class:`ProfileReport`) and the provenance forward's finding
(:class:`ProvenanceReport`) are records too, down to each op's times.

Both sides import this module (it sits below the evaluator and the worker, beside the messages that carry it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, ClassVar

from musaenv.isolation.records import Message, ProtocolError

__all__ = [
    "GpuPlan",
    "KernelTimes",
    "Match",
    "OpTime",
    "Phase",
    "PlanLayer",
    "ProfileReport",
    "ProfileRun",
    "ProvenanceReport",
    "RuntimeChecks",
    "RuntimeReport",
    "RuntimeReports",
    "SandboxState",
    "Tampered",
    "Threads",
    "TimingReport",
    "TrialsReport",
]


class Phase(str, Enum):
    """A phase of the candidate worker's run that the runtime probe reports on (its value is the wire spelling)."""

    TRIALS = "trials"
    TIMING = "timing"


@dataclass(frozen=True)
class RuntimeChecks(Message):
    """What the runtime probe checks in the candidate worker (the request's part of
    :class:`~musaenv.verification.runtime.RuntimeSettings`; absent from a request: everything off)."""

    policy: str = "off"
    """The aten-op policy of the profiled forward: ``strict``, ``kernelbench``, ``permissive`` or ``off``."""
    checks: bool = False
    """The other runtime checks: kernel calls, output provenance and dependence, repeat, threads, timers."""
    atol: float = 1e-4
    """The task's absolute tolerance, for the provenance forward (1e-4: the fp32 default)."""
    rtol: float = 1e-4
    """The task's relative tolerance, likewise."""


@dataclass(frozen=True)
class Threads(Message):
    """Threads of the worker process around a phase, and CPU time beyond the allowed threads (CPU only)."""

    base: int = 0
    """Threads before the candidate's code ran (0: not observed)."""
    max_seen: int = 0
    """The most threads seen since."""
    overuse: list[str] = field(default_factory=list)
    """Why the trial forwards kept more cores busy than allowed, one sentence each (empty: they did not)."""


@dataclass(frozen=True)
class Tampered(Message):
    """Watched objects that are no longer what they were before the candidate loaded, by name."""

    timer: list[str] = field(default_factory=list)
    """Clocks and synchronisation the timer uses."""
    harness: list[str] = field(default_factory=list)
    """Comparison and harness functions, and the dispatcher's kernels of the ops the harness relies on."""


@dataclass(frozen=True)
class RuntimeReport(Message):
    """What both phases report about the process (all defaults: the checks were off and nothing was observed)."""

    PHASE: ClassVar[Phase]
    device_type: str = "cpu"
    """The evaluation device's type (a GPU runtime may start helper threads lazily: threads only warn there)."""
    threads: Threads = field(default_factory=Threads)
    """The worker's threads."""
    global_state: list[str] = field(default_factory=list)
    """Global torch settings the candidate changed, ``"name: before -> after"`` each."""
    tampered: Tampered = field(default_factory=Tampered)
    """Harness objects the candidate replaced."""


@dataclass(frozen=True)
class OpTime(Message):
    """An outermost aten op (no aten ancestor) of the profiled forward, its calls summed."""

    name: str
    """The op, e.g. ``aten::_softmax``."""
    count: int = 0
    """Its calls."""
    cpu_us: float = 0.0
    """The profiler's CPU time of them."""
    device_us: float = 0.0
    """Their device time (0 off CUDA)."""
    kernel_device_us: float = 0.0
    """The part of it inside calls of the candidate's kernels (torch compute the kernels called)."""


@dataclass(frozen=True)
class KernelTimes(Message):
    """Calls into the candidate's kernels during the profiled forward (:class:`~musaenv.verification.runtime_profile
    .KernelTime`)."""

    calls: int = 0
    """Outermost calls."""
    cpu_us: float = 0.0
    """Thread CPU time inside them."""
    device_us: float = 0.0
    """Device time of their profiler ranges (0 off CUDA)."""


@dataclass(frozen=True)
class ProfileRun(Message):
    """What kernel coverage reads of one profiled forward (:mod:`musaenv.verification.coverage`)."""

    ok: bool = False
    """The profiler ran and its events were read."""
    kernel: KernelTimes | None = None
    """The kernels' calls and times (``None``: kernel calls were not timed)."""
    op_cpu_us: dict[str, list[float]] = field(default_factory=dict)
    """Per op the recording mode saw: ``[CPU us, CPU us inside kernel calls]``."""
    ops: list[OpTime] = field(default_factory=list)
    """The profiler's outermost aten ops."""
    device_total_us: float | None = None
    """Self device time of every event (``None``: no device time, the host basis)."""


@dataclass(frozen=True)
class ProfileReport(ProfileRun):
    """The profiled repeat of trial 1 (:func:`musaenv.verification.runtime_profile.profile_call`)."""

    error: str = ""
    """Why there is no profile (``ok`` false)."""
    wall_us: float = 0.0
    """Wall time of the profiled forward."""
    other_ops: list[str] = field(default_factory=list)
    """Named non-aten ops the profiler saw (``prim::``, ``profiler::`` left out)."""
    seen: list[str] = field(default_factory=list)
    """Every event name the profiler saw, the kernel range's excepted."""
    dispatched: list[str] = field(default_factory=list)
    """Every op the recording mode saw (what reached the dispatcher)."""
    preflight_ok: bool = False
    """The profiler worked in this worker before the candidate loaded (a broken one is then the candidate's)."""
    runs: list[ProfileRun] = field(default_factory=list)
    """More profiled forwards for the coverage floor (the parent takes the median)."""

    def coverage_run(self) -> ProfileRun:
        """What kernel coverage reads of this forward, as one of another report's ``runs``."""
        return ProfileRun(self.ok, self.kernel, self.op_cpu_us, self.ops, self.device_total_us)


@dataclass(frozen=True)
class Match(Message):
    """An output of forward that a forbidden torch op computed (the provenance forward's finding)."""

    output: int
    """Which output of forward (flattened)."""
    op: str
    """The torch op, e.g. ``aten::_softmax``."""
    share: float
    """Share of the output's sampled elements that agree with what the op computed."""
    how: str
    """``inputs``: the op ran on values known before forward; ``replay``: replayed from known values."""


@dataclass(frozen=True)
class ProvenanceReport(Message):
    """Which torch op, if any, computed forward's output (:mod:`musaenv.verification.runtime_provenance`)."""

    ops: int = 0
    """Torch ops the mode followed."""
    truncated: bool = False
    """Forward ran more than ``max_ops`` ops: the rest were not followed."""
    max_ops: int = 0
    """The bound on ops followed."""
    forbidden: int = 0
    """Forbidden torch ops among them."""
    from_inputs: int = 0
    """Of those, the ones that ran on values known before forward."""
    matches: list[Match] = field(default_factory=list)
    """Outputs a forbidden op computed (empty: none)."""
    error: str = ""
    """Why forward could not be followed (it raised under the mode only); empty: it was."""
    wall_ms: float | None = None
    """Wall time of the provenance forward (``None``: it raised)."""


@dataclass(frozen=True)
class TrialsReport(RuntimeReport):
    """After the trials: a profiled, poisoned repeat of trial 1 (its outputs the first ``repeat_outputs`` arrays
    that follow), the perturbed run's outputs (the next ``perturb_outputs``), the rewrite runs' (the rest)."""

    TYPE: ClassVar[str] = "runtime_trials"
    PHASE: ClassVar[Phase] = Phase.TRIALS
    profile: ProfileReport | None = None
    """The profiled forward (:mod:`musaenv.verification.runtime_profile`); ``None``: the aten-op policy is off."""
    provenance: ProvenanceReport | None = None
    """Which torch op computed the output (:mod:`musaenv.verification.runtime_provenance`); ``None``: not followed."""
    repeat_calls: int = 1
    """Extension calls that returned during the repeat of trial 1."""
    repeat_outputs: int = 0
    """Arrays of the repeat (0: not run)."""
    perturb_outputs: int = 0
    """Arrays of the run with the last kernel call's result overwritten (0: not run)."""
    perturb_note: str = ""
    """What the perturbed run did, or why it was skipped."""
    rewrite_outputs: int = 0
    """Arrays per rewrite call (0: not run)."""
    rewrite_calls: int = 1
    """Rewrite calls sent: 2 when trial 1's fresh call comes first."""
    rewrite_trial: int = -1
    """The later trial whose values were written into trial 1's tensors (-1: none)."""
    rewrite_note: str = ""
    """What the rewrite run did, or why it was skipped."""
    kernel_calls: list[int] | None = None
    """Extension calls that returned per correctness trial; ``None``: calls are not counted for this backend."""


@dataclass(frozen=True)
class TimingReport(RuntimeReport):
    """After the timing: a re-measure with a clock captured before the candidate loaded, and the calls counted."""

    TYPE: ClassVar[str] = "runtime_timing"
    PHASE: ClassVar[Phase] = Phase.TIMING
    remeasure_ms: list[float] = field(default_factory=list)
    """The re-measured calls' times."""
    forward_calls: int = 0
    """Forward calls of the timing phase, re-measure included."""
    kernel_calls: int | None = None
    """Extension calls that returned meanwhile; ``None``: not counted for this backend."""


@dataclass(frozen=True)
class RuntimeReports:
    """The reports a candidate's worker sent, at most one per phase (the parent's record of them, never sent)."""

    trials: TrialsReport | None = None
    timing: TimingReport | None = None

    def add(self, report: RuntimeReport) -> RuntimeReports:
        """These reports with ``report`` added.

        Raises:
            ProtocolError: that phase was reported already.
        """
        if getattr(self, report.PHASE.value) is not None:
            raise ProtocolError(f"a second runtime report of phase {report.PHASE.value!r}")
        if isinstance(report, TrialsReport):
            return replace(self, trials=report)
        assert isinstance(report, TimingReport)  # the only other phase
        return replace(self, timing=report)


@dataclass(frozen=True)
class PlanLayer(Message):
    """One sandbox layer checked against what the GPU driver needs (a :class:`musaenv.isolation.gpu_plan.GpuLayer`
    on the wire)."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class GpuPlan(Message):
    """The GPU plan of a worker's sandbox, layer by layer, as the worker got it."""

    device_memory: str
    """The device allocator's bound (:func:`musaenv.isolation.gpu_plan.limit_device_memory`)."""
    layers: list[PlanLayer] = field(default_factory=list)


@dataclass(frozen=True)
class SandboxState(Message):
    """What the candidate worker's sandbox applied (:class:`musaenv.isolation.sandbox.SandboxReport`'s JSON, sent
    with the ``load`` stage; ``EvalResult.extra["sandbox"]``)."""

    implementation: str = ""
    """``extension`` or ``python``; empty: no sandbox could be entered (``missing`` says why)."""
    applied: list[str] = field(default_factory=list)
    """Measures in force, in the order applied (docs/sandbox.md)."""
    not_applied: dict[str, str] = field(default_factory=dict)
    """Measure -> why it was skipped or failed."""
    landlock_abi: int = 0
    writable_paths: list[str] = field(default_factory=list)
    threads_at_entry: int = 0
    threads_uncovered: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Measure -> milliseconds spent on it (``total`` included)."""
    gpu_plan: GpuPlan | None = None
    """On a GPU, the plan of its layers (``None``: the CPU)."""
    missing: list[str] = field(default_factory=list)
    """Why no sandbox could be entered at all (empty: one was)."""

    def report(self) -> dict[str, Any]:
        """The JSON a result carries: the fields that apply (no ``gpu_plan`` on the CPU; an unavailable sandbox
        only as ``applied`` and ``missing``)."""
        if not self.implementation:
            return {"applied": list(self.applied), "missing": list(self.missing)}
        return {k: v for k, v in self.to_dict().items() if k != "missing" and v is not None}
