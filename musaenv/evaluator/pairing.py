"""Paired timing, driven by the parent: the reference and the candidate timed call by call, interleaved.

Both workers are alive and pinned to the same timing cores. For each call the parent tells one worker to prepare
it (:class:`~musaenv.isolation.messages.TimePrepare`: the call's inputs drawn then from a seed the parent picks
afresh for the pair and sends to both workers, the cache flushed), waits for its
:class:`~musaenv.isolation.messages.TimeReady`, sends :class:`~musaenv.isolation.messages.TimeCall` and reads its
:class:`~musaenv.isolation.messages.TimeDone` (the call ran and its output was read in full, as a fingerprint);
then the other worker's call. One worker runs at a time, each prepares only when told, and nothing but the timed
call runs in a window. Pair ``i`` is the two calls on input ``i``; who goes first
alternates from pair to pair, so a slow first or second position cancels. At most ``repeats`` pairs run; after
``min_pairs`` the parent stops at an even count (both orders alike) once the speedup's interval is ``stop_width``
narrow (:func:`~musaenv.timing.paired.settled`): a steady pair of programs is not timed longer than it needs.

The sample of a call is measured by the parent from sending the call to reading its answer: on the CPU the worker
process's CPU time over that window, read from the kernel's accounting (:func:`~musaenv.evaluator.cpu_watch.
process_cpu_clock`: every thread, exited ones included; the time a busy host keeps the worker off a core is not in
it; read only once no thread of the worker runs, when the kernel's sum is current, so each worker waits for a word
after its last call too), on a GPU (where the work is not CPU time) the parent's monotonic clock. Nothing in the
candidate's process (a saved clock, a list of samples, a libpython slot) decides a sample. The workers' own measures
travel along and are only cross-checked (:func:`musaenv.timing.paired.sample_mismatch`), and so is the CPU time each
worker spends outside its windows (:func:`musaenv.timing.paired.outside_work`: work moved before the clock starts).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from musaenv.evaluator.cpu_watch import page_faults, process_cpu_clock
from musaenv.isolation.channel import ProtocolError, Stalled
from musaenv.isolation.limits import StageClock
from musaenv.isolation.messages import Result, TimeCall, TimeDone, TimeEnd, TimePrepare, TimeReady, Timing, decode
from musaenv.isolation.plans import TimingPlan
from musaenv.isolation.process import WorkerProcess
from musaenv.timing.paired import PairedSamples, settled

__all__ = ["Handoff", "Pairer", "PairingError", "RefSession", "end_unused", "pair_calls"]

Got = tuple[dict[str, Any], list[np.ndarray]]
Handoff = Got | str
"""What ends pairing early on the candidate's side: a message that is not part of it, or the limit that ran out."""

_POLL_S = 0.25


class PairingError(Exception):
    """The reference's side of paired timing failed: the harness's problem (``infra_error``), never the candidate's."""


@dataclass(frozen=True)
class Pairer:
    """Starts the reference's side of one evaluation's paired timing: :attr:`ahead` when the candidate's trials
    begin (its warm-up sent ahead, best effort), the call itself when the candidate reaches its timing."""

    start: Callable[[], RefSession]
    ahead: Callable[[], None] = lambda: None


class RefSession:
    """The reference worker's side of one paired timing (started by its :class:`~musaenv.isolation.messages.
    PairedRequest`), read within the limits of ``clock``."""

    def __init__(self, worker: WorkerProcess, clock: StageClock) -> None:
        self.worker = worker
        self.clock = clock
        self.timing: Timing | None = None
        self.arrays: list[np.ndarray] = []  # those of the last message read
        self.broken = False  # left mid-protocol and closed: its service must start another worker

    def send(self, msg: dict[str, Any]) -> None:
        """Send ``msg``; a gone worker is a :class:`PairingError`."""
        try:
            self.worker.chan.send(msg, give_up=self.clock.over)
        except (OSError, Stalled) as e:
            raise PairingError(f"the reference worker did not take its timing message ({e})") from None

    def recv(self) -> dict[str, Any]:
        """The reference worker's next message (the arrays that follow it in :attr:`arrays`)."""
        while True:
            try:
                if self.worker.chan.poll(_POLL_S):
                    msg, self.arrays = self.worker.chan.recv(self.clock.over)
                    return msg
            except (EOFError, OSError, ProtocolError, Stalled) as e:
                raise PairingError(f"the reference worker failed while timing: {e!r}") from None
            why = self.clock.over()
            if why is not None:
                raise PairingError(f"the reference's paired timing: {self.clock.describe('timing', why)}")

    def next(self) -> TimeReady | TimeDone:
        """The next ``time_ready`` or ``time_done`` (a failure report is a :class:`PairingError`)."""
        msg = self.recv()
        if msg.get("type") == Result.TYPE:
            failure = Result.from_dict(msg).failure
            raise PairingError(f"the reference failed while timing:\n{failure.log if failure else '(no log)'}")
        try:
            got = decode(msg, TimeReady, TimeDone)
        except ProtocolError as e:
            raise PairingError(f"the reference answered out of turn: {e}") from None
        assert isinstance(got, (TimeReady, TimeDone))
        return got

    def finish(self) -> tuple[Timing, dict[int, list[np.ndarray]]]:
        """Read the reference's ``timing`` and ``result`` after its last call: the timing and its kept calls'
        outputs (call index -> arrays)."""
        timing, kept = None, {}
        while True:
            msg = self.recv()
            if msg.get("type") == Timing.TYPE:
                timing = Timing.from_dict(msg)
                kept = _kept_outputs(timing, self.arrays)
            elif msg.get("type") == Result.TYPE:
                failure = Result.from_dict(msg).failure
                if failure is not None or timing is None:
                    raise PairingError(f"the reference's timing ended without a result: {failure}")
                return timing, kept
            else:
                raise PairingError(f"unexpected message from the reference while timing: {msg.get('type')!r}")


def end_unused(worker: WorkerProcess, limit_s: float = 30.0) -> bool:
    """End a reference's paired request that no pairing used: told to stop before its first call, it sends its
    empty timing and its result. False when it did not (the caller restarts the worker)."""
    session = RefSession(worker, StageClock(worker.pid, limit_s))
    try:
        session.send(TimeEnd().to_dict())
        session.finish()
    except PairingError:
        return False
    return True


def _kept_outputs(timing: Timing, arrays: list[np.ndarray]) -> dict[int, list[np.ndarray]]:
    """The kept calls' outputs of a ``timing`` message, split by its ``kept_counts`` (none if they disagree)."""
    if len(timing.kept) != len(timing.kept_counts) or sum(timing.kept_counts) != len(arrays):
        return {}
    kept, pos = {}, 0
    for call, n in zip(timing.kept, timing.kept_counts):
        kept[int(call)], pos = arrays[pos : pos + n], pos + n
    return kept


@dataclass
class _Side:
    """One worker's part of the pairing: how to read and write it, and what it measured."""

    recv: Callable[[], TimeReady | TimeDone | Handoff]
    send: Callable[[dict[str, Any]], None]
    cpu: Callable[[], int] | None  # the worker's CPU-time clock (ns), None: the parent's wall clock decides
    ms: list[float] = field(default_factory=list)
    own_ms: list[float] = field(default_factory=list)
    out_ms: list[float] = field(default_factory=list)  # CPU time since the end of its previous window
    faults: list[tuple[int, int]] = field(default_factory=list)  # per window: (minor, major) page faults
    prep_ms: list[float] = field(default_factory=list)  # per call, wall: asked to prepare -> ready
    wall_ms: list[float] = field(default_factory=list)  # per call, wall: time_call sent -> time_done read
    last_ns: int | None = None

    def page_faults(self) -> tuple[int, int] | None:
        """The worker's page faults so far (on the CPU clock only: it names the worker's pid)."""
        pid = getattr(self.cpu, "pid", None)
        return page_faults(pid) if isinstance(pid, int) else None


def _timed(side: _Side, index: int, seed: int) -> Handoff | None:
    """Call ``index`` of ``side`` on inputs drawn from ``seed``: prepared when told, then timed by this process from
    call to answer."""
    asked = time.perf_counter_ns()
    side.send(TimePrepare(index=index, seed=seed).to_dict())
    ready = side.recv()
    if isinstance(ready, (TimeReady, TimeDone)) and (not isinstance(ready, TimeReady) or ready.index != index):
        raise ProtocolError(f"expected readiness for timed call {index}, got {ready!r}"[:200])
    if not isinstance(ready, TimeReady):
        return ready
    c0 = side.cpu() if side.cpu is not None else 0
    f0 = side.page_faults()
    t0 = time.perf_counter_ns()
    side.send(TimeCall(index=index).to_dict())
    done = side.recv()
    t1 = time.perf_counter_ns()
    c1 = side.cpu() if side.cpu is not None else 0
    f1 = side.page_faults()
    if isinstance(done, (TimeReady, TimeDone)) and (not isinstance(done, TimeDone) or done.index != index):
        raise ProtocolError(f"expected the end of timed call {index}, got {done!r}"[:200])
    if not isinstance(done, TimeDone):
        return done
    side.ms.append(((c1 - c0) if side.cpu is not None else (t1 - t0)) / 1e6)
    side.prep_ms.append((t0 - asked) / 1e6)
    side.wall_ms.append((t1 - t0) / 1e6)
    if f0 is not None and f1 is not None:
        side.faults.append((f1[0] - f0[0], f1[1] - f0[1]))
    if side.cpu is not None and side.last_ns is not None:
        side.out_ms.append((c0 - side.last_ns) / 1e6)
    side.last_ns = c1
    side.own_ms.append(float(done.ms))
    return None


def pair_calls(
    cand_recv: Callable[[], TimeReady | TimeDone | Handoff],
    cand_send: Callable[[dict[str, Any]], None],
    ref: RefSession,
    timing: TimingPlan,
    cand_cpu: Callable[[], int] | None = None,
    cand_waits: Callable[[float], None] | None = None,
) -> tuple[PairedSamples, Handoff | None]:
    """Run the paired calls of the plan ``timing`` (``repeats``, ``max_time_s``, ``keep``).

    ``cand_recv`` returns the candidate's next ``time_ready``/``time_done``, or what ended its part (a message
    outside the protocol, e.g. its failure report, or the limit that ran out), which is handed back with the pairs
    measured so far. The reference's own measures and fingerprints come from its ``timing`` message.
    ``cand_cpu``: the candidate worker's CPU-time clock; given (on the CPU), both workers' samples are CPU time.
    ``cand_waits`` is told the seconds the candidate waited on the reference's calls (not the candidate's time).

    Raises:
        PairingError: the reference's side failed.
        ProtocolError: the candidate answered out of turn.
    """
    try:
        return _pair_calls(_Side(cand_recv, cand_send, cand_cpu), ref, timing, cand_waits or (lambda s: None))
    except BaseException:
        ref.broken = True  # left mid-protocol: the service starts a fresh reference worker for the next request
        ref.worker.close()
        raise


def _pair_calls(
    c: _Side, ref: RefSession, timing: TimingPlan, waits: Callable[[float], None]
) -> tuple[PairedSamples, Handoff | None]:
    repeats, budget = timing.repeats, timing.max_time_s
    keep = list(timing.keep)
    ref_cpu = process_cpu_clock(ref.worker.pid) if c.cpu is not None else None
    c.cpu = c.cpu if ref_cpu is not None else None  # both on one clock, or both on the wall clock
    r = _Side(ref.next, ref.send, ref_cpu)
    firsts: list[bool] = []
    seeds: list[int] = []
    handoff: Handoff | None = None
    end = time.monotonic() + budget
    i = 0
    while handoff is None:
        firsts.append(i % 2 == 0)
        seeds.append(secrets.randbelow(2**31))  # drawn now: no worker can know a later call's inputs
        for side in (r, c) if firsts[-1] else (c, r):
            t0 = time.monotonic()
            handoff = _timed(side, i, seeds[-1])
            if side is r:
                waits(time.monotonic() - t0)
            if handoff is not None:
                break
        i += 1
        if handoff is not None:
            break
        kept = not any(k >= i for k in keep)
        enough = i >= timing.min_pairs and i % 2 == 0 and kept and settled(r.ms, c.ms, timing.stop_width)
        if i >= repeats or enough or (i >= 3 and time.monotonic() > end and kept):
            c.send(TimeEnd().to_dict())  # both wait for a word after every call, the last one too
            r.send(TimeEnd().to_dict())
            break
    if handoff is not None:
        ref.send(TimeEnd().to_dict())  # the reference waits for its next call: let it end
    t0 = time.monotonic()
    ref_timing, ref_kept = ref.finish()
    waits(time.monotonic() - t0)
    n = min(len(r.ms), len(c.ms))
    eager = ref_timing.baseline == "eager"
    prints = list(ref_timing.fingerprints) if eager else None
    samples = PairedSamples(
        r.ms[:n], c.ms[:n], r.own_ms[:n], c.own_ms[:n], firsts[:n], prints, ref_timing.baseline_note,
        clock="cpu" if c.cpu is not None else "wall", ref_out_ms=r.out_ms, cand_out_ms=c.out_ms,
        unsettled=sum(int(getattr(side.cpu, "unsettled", 0)) for side in (r, c)), seeds=seeds,
        ref_faults=r.faults[:n], cand_faults=c.faults[:n], ref_prep_ms=r.prep_ms[:n], cand_prep_ms=c.prep_ms[:n],
        ref_wall_ms=r.wall_ms[:n], cand_wall_ms=c.wall_ms[:n], ref_kept=ref_kept if eager else {},
    )  # fmt: skip
    return samples, handoff
