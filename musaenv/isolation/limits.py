"""Limits that measure the candidate, not the host (parent side).

A wall-clock limit charges a candidate for every second the host made it wait: on a machine with other builds and
trainers beside it, the same honest program passes on a quiet host and times out on a busy one. The limits here
count only what the candidate's own process tree did:

* **CPU seconds of the tree** (:func:`tree_cpu_seconds`): user + system time of a process and every descendant,
  exited ones included through their parents' ``cutime``/``cstime``. A busy host does not inflate it.
* **Own time** of a worker (:class:`StageClock`): wall time minus the time its threads sat runnable on a run queue
  waiting for a CPU (``run_delay`` of ``/proc/<pid>/task/<tid>/schedstat``). What is left is time it ran or chose
  to wait (``sleep``, a blocking call), which is the candidate's; a busy host only adds run-queue delay. Without
  schedstat (kernels without ``CONFIG_SCHED_INFO``) own time is the wall time, as before. Time the worker spent
  *stopped* (``SIGSTOP`` from outside, a debugger, a frozen cgroup: state ``T``/``t``) is not on a run queue either
  and is not its own: it is left out too, so a stalled worker reaches only the backstop. Only threads that kept
  the priority they were started with count: a thread that made itself ``SCHED_IDLE``, ``SCHED_BATCH`` or nicer
  waits on the run queue by its own choice (on a busy host a ``SCHED_IDLE`` spinner waits for nearly the whole
  stage), so its wait is the candidate's and cannot turn a hang into the host's ``infra_error``.

Each limit has a generous wall-clock **backstop** (:func:`backstop_s`). When only the backstop fires, the host (not
the candidate) was too slow: the verdict is ``infra_error`` (retried by the pools, never scored), not a
``compile_error`` or ``timeout``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from musaenv.isolation.proctree import descendants

__all__ = [
    "BACKSTOP_EXTRA_S",
    "BACKSTOP_FACTOR",
    "StageClock",
    "backstop_s",
    "has_schedstat",
    "is_stopped",
    "run_delay_s",
    "tree_cpu_seconds",
    "watch_process",
]

#: Wall-clock backstop = limit * factor + extra. A candidate starved to a third of a core (two busy loops per core
#: beside it) still finishes inside it; only a host that stalls it longer than that is reported as infra_error.
BACKSTOP_FACTOR = 3.0
BACKSTOP_EXTRA_S = 30.0
_POLL_S = 0.25
_PROC = Path("/proc")


def backstop_s(limit_s: float) -> float:
    """The wall-clock backstop of a limit of ``limit_s`` candidate seconds."""
    return limit_s * BACKSTOP_FACTOR + BACKSTOP_EXTRA_S


def _own_cpu(pid: int) -> float | None:
    """utime + stime + cutime + cstime of ``pid`` in seconds (``None`` when it is gone)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    f = text[text.rindex(")") + 2 :].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of ``pid`` and every live descendant, exited descendants included once their parent (or the
    subreaper that inherited them) reaped them; ``None`` when ``pid`` is gone."""
    total = _own_cpu(pid)
    if total is None:
        return None
    for child in descendants(pid):
        total += _own_cpu(child) or 0.0
    return total


def has_schedstat() -> bool:
    """True when this kernel reports run-queue delays (``/proc/self/schedstat``)."""
    return (_PROC / "self" / "schedstat").exists()


def _demoted(task: Path, base_nice: int) -> bool:
    """True when the thread at ``task`` asked to wait: a scheduling policy other than ``SCHED_OTHER``
    (``SCHED_IDLE`` runs only when a core has nothing else to do, ``SCHED_BATCH`` yields to interactive work) or a
    nice value above the one the worker started with. Such a thread's run-queue wait is what it chose, not what the
    host did to it (fields 19 and 41 of ``/proc/<pid>/task/<tid>/stat``, proc(5)); a thread that cannot be read
    counts as demoted, so it never lowers the candidate's own time."""
    try:
        text = (task / "stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()
        return int(fields[38]) != os.SCHED_OTHER or int(fields[16]) > base_nice
    except (OSError, ValueError, IndexError):
        return True


def _thread_delays(pid: int, base_nice: int | None = None) -> dict[str, float]:
    """Run-queue delay (seconds) per thread of ``pid``; with ``base_nice``, only of threads that did not demote
    themselves (:func:`_demoted`), whose delay is then the host's doing."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return out
    for tid in tids:
        task = _PROC / str(pid) / "task" / tid
        with contextlib.suppress(OSError, ValueError, IndexError):
            delay = int((task / "schedstat").read_text().split()[1]) / 1e9
            if base_nice is None or not _demoted(task, base_nice):
                out[tid] = delay
    return out


def is_stopped(pid: int) -> bool:
    """True while ``pid`` is stopped (``SIGSTOP``/``SIGTSTP``, or a tracing stop)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2 : text.rindex(")") + 3] in ("T", "t")


def run_delay_s(pid: int) -> float:
    """The longest time any thread of ``pid`` has waited on a run queue (seconds; 0 without schedstat)."""
    return max(_thread_delays(pid).values(), default=0.0)


@dataclass
class StageClock:
    """Times one stage of a worker by what the worker did, with a wall-clock backstop.

    Args:
        pid: The worker.
        limit_s: The stage's limit in candidate seconds (CPU seconds of its tree, and own time).
        stops_are_own: Count time the worker spent stopped as its own. Set it when the worker's sandbox could not
            refuse the stop signals it might send itself (no ``seccomp_signals``): a stop is then possibly the
            candidate's doing, and it must reach the candidate's own limit (``timeout``), not the backstop.
    """

    pid: int
    limit_s: float
    stops_are_own: bool = False
    _t0: float = 0.0
    _cpu0: float = 0.0
    _delay0: dict[str, float] = field(default_factory=dict)
    _excluded_s: float = 0.0
    _stopped_s: float = 0.0
    _sampled: float = 0.0
    _base_nice: int = 0
    _last: dict[str, float] | None = None  # the last reading while the worker was alive

    def __post_init__(self) -> None:
        # Workers inherit the parent's nice value (no layer changes it): a thread above it lowered its own priority.
        self._base_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.restart(self.limit_s)

    def restart(self, limit_s: float) -> None:
        """Begin a new stage with limit ``limit_s``."""
        self.limit_s = limit_s
        self._t0 = time.monotonic()
        self._cpu0 = tree_cpu_seconds(self.pid) or 0.0
        self._delay0 = _thread_delays(self.pid)
        self._excluded_s = 0.0
        self._stopped_s, self._sampled = 0.0, self._t0
        self._last = None

    def exclude(self, seconds: float) -> None:
        """Seconds the worker waited on the parent (its builds): not the candidate's time."""
        self._excluded_s += seconds
        self._sampled = time.monotonic()  # the wait is excluded already: not stopped time as well

    def usage(self) -> dict[str, float]:
        """Wall, CPU and own seconds of the stage so far (JSON-safe).

        Stopped time is sampled: each call found the worker stopped adds the time since the previous call (the
        callers poll every fraction of a second). Once the worker is gone (killed at its limit, then described),
        the last reading taken while it lived is returned: its CPU and run-queue waits can no longer be read."""
        if self._last is not None and tree_cpu_seconds(self.pid) is None:
            return dict(self._last)
        t = time.monotonic()
        if is_stopped(self.pid):
            self._stopped_s += t - self._sampled
        self._sampled = t
        wall = t - self._t0 - self._excluded_s
        cpu = (tree_cpu_seconds(self.pid) or self._cpu0) - self._cpu0
        now = _thread_delays(self.pid, self._base_nice)  # a thread that demoted itself waits by its own choice
        waited = max((d - self._delay0.get(tid, 0.0) for tid, d in now.items()), default=0.0)
        waited += 0.0 if self.stops_are_own else self._stopped_s
        reading = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "own_s": round(max(0.0, wall - waited), 3)}
        if tree_cpu_seconds(self.pid) is not None:  # still alive after the reads: a reading of the living worker
            self._last = reading
        return dict(reading)

    def over(self) -> str | None:
        """``"cpu"`` or ``"own"`` when the candidate used up the limit, ``"backstop"`` when only the wall-clock
        backstop ran out (the host's fault), ``None`` while within both."""
        u = self.usage()
        if u["cpu_s"] > self.limit_s:
            return "cpu"
        if u["own_s"] > self.limit_s:
            return "own"
        if u["wall_s"] > backstop_s(self.limit_s):
            return "backstop"
        return None

    def describe(self, stage: str, why: str) -> str:
        """The message for a stage that ended at its limit."""
        u = self.usage()
        spent = f"(CPU {u['cpu_s']:.1f} s, own time {u['own_s']:.1f} s, wall {u['wall_s']:.1f} s)"
        if why == "backstop":
            return (
                f"the {stage} stage ran past the {backstop_s(self.limit_s):.0f} s wall-clock backstop while the "
                f"candidate used less than its {self.limit_s:.0f} s {spent}: the host was too slow (not the candidate)"
            )
        what = "CPU seconds" if why == "cpu" else "seconds of its own time"
        return f"the {stage} stage used more than its {self.limit_s:.0f} {what} {spent}; the worker was killed"


def watch_process(proc: subprocess.Popen[bytes], cpu_limit_s: float) -> str | None:
    """Wait for ``proc``: ``None`` when it exited by itself, ``"cpu"`` when its tree used more than
    ``cpu_limit_s`` CPU seconds, ``"backstop"`` when the wall-clock backstop ran out first (the caller kills it)."""
    deadline = time.monotonic() + backstop_s(cpu_limit_s)
    last = 0.0
    while True:
        try:
            proc.wait(timeout=_POLL_S)
            return None
        except subprocess.TimeoutExpired:
            pass
        cpu = tree_cpu_seconds(proc.pid)
        last = cpu if cpu is not None else last
        if last > cpu_limit_s:
            return "cpu"
        if time.monotonic() > deadline:
            return "backstop"
