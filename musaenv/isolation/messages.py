"""The worker protocol: one frozen record per message between the evaluator, its workers and its build service.

Every message on a :class:`~musaenv.isolation.channel.Channel` is one of these records as a JSON object with a
``type`` key. :meth:`Message.from_dict` rejects a message with an unknown or a missing field, or a field of the
wrong JSON type, with a :class:`ProtocolError`, so a reader never guesses at a key it does not know.

The first message of every worker is :class:`Ready`, carrying :data:`PROTOCOL_VERSION`. A worker of another
version (other musaenv code on the worker's path) is refused before it is sent anything: :func:`read_hello`
raises :class:`ProtocolMismatch` naming both versions, which the evaluator reports as ``infra_error``, never as a
candidate's verdict (a skew once turned every honest candidate into ``timed_output_mismatch``).

Who sends what (candidate worker: :mod:`musaenv.worker.candidate`; reference worker:
:mod:`musaenv.worker.reference`):

* worker -> parent: :class:`Ready`, :class:`Stage`, :class:`Trial`, :class:`TrialStats`, :class:`Timing`,
  :class:`TrialsReport` / :class:`TimingReport` (:mod:`.reports`), :class:`BuildRequest` (the loader hook,
  :mod:`musaenv.worker.loader_hook`), :class:`Result`.
* parent -> worker: :class:`CandidateRequest` (candidate), :class:`ReferenceRequest` / :class:`DrawRequest` /
  :class:`PairedRequest` / :class:`Shutdown` (reference), :class:`Go`, :class:`BuildResult` (the build service,
  :mod:`musaenv.evaluator.candidate`).
* paired timing (:mod:`musaenv.evaluator.pairing`), both workers, per timed call: parent :class:`TimePrepare` ->
  worker :class:`TimeReady` -> parent :class:`TimeCall` -> worker :class:`TimeDone`; parent :class:`TimeEnd`
  instead of the next :class:`TimePrepare` to stop.

A build spec (:class:`~musaenv.toolchains.buildspec.BuildSpec`, owned and checked by the build service) travels as
a JSON object that the parent parses on receipt; every other nested part is a record (:mod:`.reports`,
:mod:`.plans`, :class:`~musaenv.types.BuildRecord`) or a frozen config, decoded with the message.

Size: every typed record that crosses the process boundary, in the one module both sides import (the protocol
version lives with them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from musaenv.config import SandboxConfig
from musaenv.isolation.plans import TimingPlan, TrialSpec
from musaenv.isolation.records import Message, ProtocolError, ProtocolMismatch, decode
from musaenv.isolation.reports import Phase, RuntimeChecks, RuntimeReport, SandboxState, TimingReport, TrialsReport
from musaenv.types import BuildRecord

__all__ = [
    "PROTOCOL_VERSION",
    "BuildRequest",
    "BuildResult",
    "CandidateRequest",
    "ConditionRequest",
    "DrawRequest",
    "ExitQuery",
    "ExitStatus",
    "Failure",
    "FailureStage",
    "ForkServerReady",
    "Go",
    "Message",
    "PairedRequest",
    "Phase",
    "ProtocolError",
    "ProtocolMismatch",
    "Ready",
    "ReferenceRequest",
    "Refused",
    "Release",
    "Released",
    "Result",
    "RunRequest",
    "RuntimeChecks",
    "RuntimeReport",
    "Shutdown",
    "Spawn",
    "Spawned",
    "Stage",
    "TimeCall",
    "TimeDone",
    "TimeEnd",
    "TimePrepare",
    "TimeReady",
    "Timing",
    "TimingPlan",
    "TimingReport",
    "Trial",
    "TrialSpec",
    "TrialStats",
    "TrialsReport",
    "decode",
    "read_hello",
]

# Raise on any change of a record's fields or meaning: parent and workers must run the same code.
# 4: paired timing (TimePrepare, TimeReady, TimeCall, TimeDone, TimeEnd, PairedRequest); 5: stress trials (a trial's
# ``scale`` and ``offset``, :attr:`Trial.skip`); 7: typed runtime reports, one record per phase (:class:`TrialsReport`,
# :class:`TimingReport`, every field sent) for the ``runtime`` message of a phase and its free-form body; 8: a run
# request's trials and timing plan as records (:class:`TrialSpec`, :class:`TimingPlan`, every field sent), and its
# runtime checks (:class:`RuntimeChecks`), its sandbox settings (a :class:`~musaenv.config.SandboxConfig`); a
# :class:`Failure`'s stage one of :class:`FailureStage`; 9: a result's builds as :class:`~musaenv.types.BuildRecord`
# (every field sent, refused when malformed), a trials report's profile and provenance as records
# (:class:`ProfileReport`, :class:`ProvenanceReport`), the ``load`` stage's sandbox report a :class:`SandboxState`;
# 10: a stress trial's conditioning judged on request only (:class:`ConditionRequest`; a :class:`ReferenceRequest`
# drops only the stress trials whose outputs are not finite)
PROTOCOL_VERSION = 10

# ------------------------------------------------------------------------------------------- worker -> parent


@dataclass(frozen=True)
class Ready(Message):
    """A worker's first message: it has imported torch and waits for a request."""

    TYPE: ClassVar[str] = "ready"
    pid: int
    torch: str
    protocol: int = PROTOCOL_VERSION


def read_hello(d: dict[str, Any]) -> Ready:
    """Parse a worker's first message, the version checked before anything else in it.

    Raises:
        ProtocolMismatch: the worker speaks another protocol version.
        ProtocolError: it is not a well-formed :class:`Ready`.
    """
    if d.get("type") != Ready.TYPE:
        raise ProtocolError(f"expected the worker's ready message, got type {d.get('type')!r}")
    if d.get("protocol") != PROTOCOL_VERSION:
        raise ProtocolMismatch(d.get("protocol"), PROTOCOL_VERSION)
    return Ready.from_dict(d)


@dataclass(frozen=True)
class Stage(Message):
    """The worker enters a stage (``load``, ``draw``, ``trials``, ``timing``); ``load`` carries the sandbox report."""

    TYPE: ClassVar[str] = "stage"
    name: str
    sandbox: SandboxState | None = None


@dataclass(frozen=True)
class Trial(Message):
    """One correctness trial's outputs (as the arrays that follow the message), their dtypes and the worker's flags.

    ``skip``: from the reference worker only (the parent reads no candidate's), why a stress trial does not count:
    the reference's outputs on it are not finite, or (answering a :class:`ConditionRequest`) disagree with the
    reference run in float64; empty: it counts.
    """

    TYPE: ClassVar[str] = "trial"
    index: int
    dtypes: list[str]
    flags: list[str]
    skip: str = ""


@dataclass(frozen=True)
class TrialStats(Message):
    """A reference trial that stands for a probed timed call: only its output statistics (no arrays)."""

    TYPE: ClassVar[str] = "trial_stats"
    index: int
    stats: list[Any]


@dataclass(frozen=True)
class Timing(Message):
    """The timed calls: per-call times, the kept calls' outputs (arrays that follow), per-call fingerprints.

    ``baseline``/``baseline_note``: which reference was timed (``compile``, or ``eager`` and why); candidates
    send the defaults.
    """

    TYPE: ClassVar[str] = "timing"
    samples_ms: list[float]
    host_ms: list[float] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    kept_counts: list[int] = field(default_factory=list)
    fingerprints: list[Any] = field(default_factory=list)
    baseline: str = "eager"
    baseline_note: str = ""


class FailureStage(str, Enum):
    """How a worker's run may end early: a verdict stage, or what the parent turns into one (``input_error``: the
    task's inputs failed, ``not_built``: nothing could be built here, ``needs_gpu``: the CPU interpreter cannot go
    on). No other stage is accepted from a worker: a run that ended early is never ``correct`` on its word."""

    FORMAT_ERROR = "format_error"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    INFRA_ERROR = "infra_error"
    INPUT_ERROR = "input_error"
    NOT_BUILT = "not_built"
    NEEDS_GPU = "needs_gpu"


@dataclass(frozen=True)
class Failure(Message):
    """Why a worker's run ended early: the stage it names and the log."""

    stage: FailureStage
    log: str


@dataclass(frozen=True)
class Result(Message):
    """A worker's last message of a request: its builds (candidates), warnings, and the failure if any."""

    TYPE: ClassVar[str] = "result"
    builds: list[BuildRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compile_only: bool = False
    failure: Failure | None = None


@dataclass(frozen=True)
class BuildRequest(Message):
    """The loader hook asks the parent's build service for one ``load_inline`` call (a ``BuildSpec`` dict)."""

    TYPE: ClassVar[str] = "build"
    spec: dict[str, Any]


# ------------------------------------------------------------------------------------------- parent -> worker


@dataclass(frozen=True)
class BuildResult(Message):
    """The build service's answer: what :func:`musaenv.toolchains.loader.build_extension` returns (its
    ``BuildOutcome`` is this record), sent to the worker as it is.

    Attributes:
        ok: True when the module was built (or, for compile-only specs, compiled cleanly).
        name: Module name (content hash).
        so_path: Path of the loadable module, when there is one.
        log: Compiler output (errors verbatim) or why the build failed.
        seconds: Wall time spent on this request.
        cached: True when the artifact came from the cache.
        timed_out: True when the build hit its time limit.
        infra_error: True when the harness failed (the builder could not run), not the candidate's sources.
        extra: JSON-safe details: ``tier`` (the build path, also on a cache hit: sealed with the artifact),
            ``declined`` (faster paths that did not apply, each ``{"tier", "why"}``) and ``steps`` (what ran).
    """

    TYPE: ClassVar[str] = "build_result"
    ok: bool
    name: str
    so_path: str | None = None
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    timed_out: bool = False
    infra_error: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Go(Message):
    """The parent grants the device for the stage the worker announced."""

    TYPE: ClassVar[str] = "go"


@dataclass(frozen=True)
class Shutdown(Message):
    """The reference worker should exit."""

    TYPE: ClassVar[str] = "shutdown"


@dataclass(frozen=True)
class RunRequest(Message):
    """What candidate and reference requests share: the program's shapes, trials and timing plan, the device.

    ``trials``: one :class:`TrialSpec` per trial (:meth:`~musaenv.evaluator.plan.EvalPlan.trial_specs`);
    ``timing``: the :class:`TimingPlan`, or ``None``: no timing.
    """

    task_source: str
    shapes: list[dict[str, Any]]
    init_seed: int
    trials: list[TrialSpec]
    timing: TimingPlan | None
    device: str
    cpu_threads: int


@dataclass(frozen=True)
class CandidateRequest(RunRequest):
    """Evaluate one candidate (the candidate worker's only request)."""

    TYPE: ClassVar[str] = "eval"
    candidate: str
    backend: str
    compile_only: bool
    allow_processes: bool
    workdir: str
    sandbox: SandboxConfig
    runtime: RuntimeChecks | None


@dataclass(frozen=True)
class ReferenceRequest(RunRequest):
    """Reference outputs (and timing) of one plan; inputs drawn by a :class:`DrawRequest` of ``draw_id`` are used."""

    TYPE: ClassVar[str] = "reference"
    task_hash: str
    draw_id: str
    atol: float
    rtol: float


@dataclass(frozen=True)
class DrawRequest(ReferenceRequest):
    """Draw a coming :class:`ReferenceRequest`'s inputs now (CPU only; no reply)."""

    TYPE: ClassVar[str] = "draw"


@dataclass(frozen=True)
class PairedRequest(ReferenceRequest):
    """Time the reference call by call, interleaved with a candidate, on the parent's :class:`TimeCall` s; answered
    by :class:`TimeReady` / :class:`TimeDone` per call, then a :class:`Timing` and a :class:`Result`."""

    TYPE: ClassVar[str] = "paired"


@dataclass(frozen=True)
class ConditionRequest(ReferenceRequest):
    """Judge the conditioning of the stress trials in ``trials`` (those a candidate missed): each run in the task's
    dtype and in float64; answered by a :class:`Trial` per trial (its :attr:`Trial.skip`) and a :class:`Result`."""

    TYPE: ClassVar[str] = "condition"


# ------------------------------------------------------------------------ paired timing (both workers)


@dataclass(frozen=True)
class TimePrepare(Message):
    """Prepare timed call ``index`` (fresh inputs, cache flushed) and say :class:`TimeReady`: a worker prepares
    only when told, so its preparation never runs inside another call's window. ``seed``: the call's inputs are
    drawn now from this seed (the same for both workers, fresh per call), so nothing of a later call exists in
    the worker before it is prepared; ``-1``: a clone of the timing pool's input."""

    TYPE: ClassVar[str] = "time_prepare"
    index: int
    seed: int = -1


@dataclass(frozen=True)
class TimeReady(Message):
    """The worker has call ``index``'s fresh inputs and flushed cache ready, and waits for its :class:`TimeCall`."""

    TYPE: ClassVar[str] = "time_ready"
    index: int


@dataclass(frozen=True)
class TimeCall(Message):
    """Run timed call ``index`` now: the parent's clock runs from sending this to reading its :class:`TimeDone`."""

    TYPE: ClassVar[str] = "time_call"
    index: int


@dataclass(frozen=True)
class TimeDone(Message):
    """Timed call ``index`` is done and its output read in full (fingerprinted); ``ms``: the worker's own
    measure of it, only cross-checked against the parent's clock, never used as the sample."""

    TYPE: ClassVar[str] = "time_done"
    index: int
    ms: float


@dataclass(frozen=True)
class TimeEnd(Message):
    """No more timed calls: the worker sends its :class:`Timing` (and the reference its :class:`Result`)."""

    TYPE: ClassVar[str] = "time_end"


# ------------------------------------------------------------------ parent <-> fork server (isolation/forkserver.py)


@dataclass(frozen=True)
class ForkServerReady(Message):
    """The fork server's first message: it imported torch and the preloaded modules, and waits for requests."""

    TYPE: ClassVar[str] = "forkserver_ready"
    protocol: int
    pid: int
    torch: str
    musaenv: str  # the package directory it imported (the client refuses other code)
    threads: int  # >1 when a library started a thread pool at import (forked children get one thread)
    cuda_initialized: bool  # a CUDA context before fork is unusable in every child: the client refuses it


@dataclass(frozen=True)
class Spawn(Message):
    """Fork a worker of ``role`` in ``cwd`` on the three descriptors sent with the request (read, write, log)."""

    TYPE: ClassVar[str] = "spawn"
    role: str
    cwd: str


@dataclass(frozen=True)
class ExitQuery(Message):
    """The exit status of a forked worker, without reaping it."""

    TYPE: ClassVar[str] = "exit_query"
    pid: int


@dataclass(frozen=True)
class Release(Message):
    """The worker ``pid`` may be reaped (its pid may be reused afterwards)."""

    TYPE: ClassVar[str] = "release"
    pid: int


@dataclass(frozen=True)
class Spawned(Message):
    """The answer to :class:`Spawn`: the worker's pid."""

    TYPE: ClassVar[str] = "spawned"
    pid: int


@dataclass(frozen=True)
class ExitStatus(Message):
    """The answer to :class:`ExitQuery`, as ``Popen.returncode`` spells it (``None`` while running or unknown)."""

    TYPE: ClassVar[str] = "exit_status"
    rc: int | None
    unknown: bool = False


@dataclass(frozen=True)
class Released(Message):
    """The answer to :class:`Release`."""

    TYPE: ClassVar[str] = "released"


@dataclass(frozen=True)
class Refused(Message):
    """The fork server could not do what was asked (a malformed request, a wrong number of descriptors)."""

    TYPE: ClassVar[str] = "refused"
    error: str
