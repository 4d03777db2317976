"""The runtime probe's reports: one record per phase, sent by the candidate worker, judged by the parent.

The worker (:class:`musaenv.verification.runtime_probe.RuntimeGuard`) builds a :class:`TrialsReport` after the
correctness trials and a :class:`TimingReport` after the timing; the parent decodes them strictly on receipt (a
report with an unknown, a missing or a mistyped field is a :class:`~musaenv.isolation.records.ProtocolError`, so a
``protocol_violation``, before anything reads it) and :func:`musaenv.verification.runtime.assess_runtime` judges
the typed fields. The profile and the provenance of a forward stay JSON objects here: their shape belongs to
:mod:`musaenv.verification.coverage`, which reads them.

Both sides import this module (it sits below the evaluator and the worker, beside the messages that carry it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, ClassVar

from musaenv.isolation.records import Message, ProtocolError

__all__ = [
    "Phase",
    "RuntimeChecks",
    "RuntimeReport",
    "RuntimeReports",
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
class TrialsReport(RuntimeReport):
    """After the trials: a profiled, poisoned repeat of trial 1 (its outputs the first ``repeat_outputs`` arrays
    that follow), the perturbed run's outputs (the next ``perturb_outputs``), the rewrite runs' (the rest)."""

    TYPE: ClassVar[str] = "runtime_trials"
    PHASE: ClassVar[Phase] = Phase.TRIALS
    profile: dict[str, Any] | None = None
    """The profiled forward (:mod:`musaenv.verification.runtime_profile`); ``None``: the aten-op policy is off."""
    provenance: dict[str, Any] | None = None
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
