"""CPU time, threads and CPU affinity of a candidate worker, read and set by the parent (parent side).

Candidate code shares its process with the worker's harness, so anything the worker measures about itself can be
forged. The parent reads the worker's CPU seconds (all threads, exited ones included) and thread count when it
lets a phase start (``go``) and when the phase's data arrives, and compares the cores used with the budget the
reference gets (``TimingConfig.cpu_threads``). A kernel that brings extra threads only while it is being timed
(C11 ``thrd_create``, raw ``clone``, a pool started in the first timed call) uses more cores than the budget
during the timing phase; on a busy host an honest kernel only ever uses fewer.

Before the timed calls the parent also pins every thread of the worker to ``cpu_threads`` CPUs
(:func:`pin_threads`; threads created later inherit the mask of their creator, and the sandbox's seccomp filter
denies ``sched_setaffinity``), so extra threads cannot buy extra cores at all; the measurement then shows what
pinning could not prevent (a kernel that cannot be pinned, a platform without affinity).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from dataclasses import dataclass, field
from typing import Any

from musaenv.isolation.proctree import cpu_seconds, thread_count

__all__ = [
    "CpuWatch",
    "PhaseUsage",
    "ProcessCpuClock",
    "over_budget",
    "page_faults",
    "pin_threads",
    "process_cpu_clock",
    "threads_running",
    "timing_cpus",
]

# /proc's CPU times come in clock ticks (10 ms): a phase shorter than this cannot be judged.
MIN_JUDGED_WALL_S = 0.1
# Slack over budget * wall: two ticks of rounding plus 30 % for the harness's own single-threaded work around
# the timed calls (fingerprints, copies), which runs on the same thread as the candidate and never in parallel.
_SLACK_S, _SLACK_FRACTION = 0.03, 0.3


# How long a reading of a worker's CPU clock waits for every thread of the worker to be off its core.
_SETTLE_S = 0.25
_SETTLE_POLL_S = 0.0001


class ProcessCpuClock:
    """Process ``pid``'s CPU time in nanoseconds (every thread, exited ones included), read when it is exact.

    The kernel's own accounting (``clock_getcpuclockid``: the CPU-time clock of another process, nanosecond
    resolution, unlike /proc's 10 ms ticks): nothing the process itself does can change it, and time it spends
    waiting for a core on a busy host is not in it. But the kernel sums another process's clock from each thread's
    runtime as of its last scheduler event, without the part of a thread still on a core since its last tick
    (``thread_group_cputime``: only the reader's own group is brought up to date). Read while a worker thread runs,
    the clock lags by up to a tick (4 ms at ``HZ=250``): a window opened that way is charged the worker's preparation
    before it, one closed that way misses its call (a wrong copy kernel's 0.3 ms calls once read as 3 ms, and were
    taken for forged). So a reading waits until no thread of the worker is running (``/proc/<pid>/task/*/stat``
    state other than ``R``) and the clock stands still across that check, which makes every thread's runtime
    current; after :data:`_SETTLE_S` it reads as it is and counts the reading in :attr:`unsettled`.
    """

    def __init__(self, pid: int, clock_id: int) -> None:
        self.pid = pid
        self.clock_id = clock_id
        self.unsettled = 0

    def raw(self) -> int:
        """The kernel's reading as it is (may lag a running thread by up to a tick)."""
        return time.clock_gettime_ns(self.clock_id)

    def __call__(self) -> int:
        deadline = time.monotonic() + _SETTLE_S
        before = self.raw()
        while True:
            quiet = not threads_running(self.pid)
            now = self.raw()
            if quiet and now == before:
                return now
            if time.monotonic() > deadline:
                self.unsettled += 1
                return now
            before = now
            time.sleep(_SETTLE_POLL_S)


def threads_running(pid: int) -> bool:
    """True while a thread of process ``pid`` is running or runnable (state ``R``); False once all wait or the
    process is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"R":
            return True
    return False


def page_faults(pid: int) -> tuple[int, int]:
    """Process ``pid``'s page faults so far, every thread's: ``(minor, major)`` (``/proc/<pid>/stat``, fields 10
    and 12); ``(0, 0)`` once it is gone. A major fault waited for a page the kernel had to read back from disk:
    a page of the process the host's memory pressure evicted (its code, a mapped file), never its own doing."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0, 0
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[7]), int(fields[9])
    except (IndexError, ValueError):
        return 0, 0


def process_cpu_clock(pid: int) -> ProcessCpuClock | None:
    """The exact CPU-time clock of process ``pid`` (:class:`ProcessCpuClock`), or ``None`` where the platform has
    none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        clock_id = ctypes.c_int()
        if libc.clock_getcpuclockid(ctypes.c_int(pid), ctypes.byref(clock_id)) != 0:
            return None
        cid = clock_id.value
        time.clock_gettime_ns(cid)  # readable now (the process exists and is ours to see)
    except (OSError, AttributeError):
        return None
    return ProcessCpuClock(pid, cid)


def timing_cpus(n: int) -> set[int]:
    """The CPUs timed calls run on: the last ``n`` this process may use (timing on the CPU is serialised by the
    evaluator's device slot, so one set serves every evaluation of a process)."""
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[-max(1, n) :])


def pin_threads(pid: int, cpus: set[int]) -> int:
    """Set the affinity of every thread of ``pid`` to ``cpus``, rescanning until no unpinned thread appears;
    returns the threads pinned (0 when the process is gone or affinity cannot be set)."""
    done: set[int] = set()
    for _ in range(8):  # a thread being created while we scan inherits its creator's (maybe unpinned) mask
        try:
            tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        except OSError:
            return len(done)
        todo = tids - done
        if not todo:
            break
        for tid in todo:
            with contextlib.suppress(OSError):  # a thread that exited meanwhile
                os.sched_setaffinity(tid, cpus)
                done.add(tid)
            done.add(tid)
    return len(done)


@dataclass(frozen=True)
class PhaseUsage:
    """What one phase of a worker used, measured from outside it.

    Attributes:
        phase: ``trials`` or ``timing``.
        wall_s: Seconds from the parent's go-ahead to the phase's data.
        cpu_s: CPU seconds the worker used meanwhile (every thread).
        threads_start: Threads when the phase began.
        threads_end: Threads when its data arrived.
    """

    phase: str
    wall_s: float
    cpu_s: float
    threads_start: int
    threads_end: int

    @property
    def cores(self) -> float:
        """Average cores in use over the phase."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "phase": self.phase, "wall_s": round(self.wall_s, 4), "cpu_s": round(self.cpu_s, 3),
            "cores": round(self.cores, 3), "threads_start": self.threads_start, "threads_end": self.threads_end,
        }  # fmt: skip


def over_budget(usage: PhaseUsage, budget_cores: int) -> bool:
    """True when the phase used clearly more CPU than ``budget_cores`` could give it in its wall time."""
    if usage.wall_s < MIN_JUDGED_WALL_S:
        return False
    allowed = budget_cores * usage.wall_s
    return usage.cpu_s > allowed + _SLACK_S + _SLACK_FRACTION * allowed


@dataclass
class CpuWatch:
    """Opens a window at a phase's go-ahead and closes it when the phase's data arrives."""

    pid: int
    phases: list[PhaseUsage] = field(default_factory=list)
    _open: tuple[str, float, float, int] | None = None

    def _threads(self) -> int:
        try:
            return thread_count(self.pid)
        except ProcessLookupError:
            return 0

    def start(self, phase: str) -> None:
        """The parent is about to let ``phase`` run."""
        cpu = cpu_seconds(self.pid)
        self._open = None if cpu is None else (phase, time.monotonic(), cpu, self._threads())

    def stop(self) -> None:
        """The open phase's data arrived (or the next phase began)."""
        if self._open is None:
            return
        phase, t0, cpu0, threads0 = self._open
        self._open = None
        cpu = cpu_seconds(self.pid)
        if cpu is not None:
            self.phases.append(PhaseUsage(phase, time.monotonic() - t0, cpu - cpu0, threads0, self._threads()))
