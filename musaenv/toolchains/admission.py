"""Machine-wide admission of builds by the memory they need (parent side).

Each evaluator process bounds its own concurrent builds (``configure_builds(max_parallel=...)``), but a pool runs
one evaluator per worker process and a training host runs several pools, trainers and rollout servers: per-process
bounds add up, and a 2-core, 24 GB host with four pool workers each starting a torch-header compile (1.5 GB each,
more at ``-O3``) beside a trainer is where the kernel's OOM killer took compilers (issue #27). Admission here is
across every musaenv process of this user that shares the key directory:

* **Slots**: ``min(cores, MemTotal / need)`` lock files in the parent-only key directory (hidden from every sandbox,
  so no candidate can hold them); a build holds one with ``flock`` while its builder runs. A process that dies drops
  its lock with it: nothing to clean up, no stale count.
* **Memory**: a slot admits a build only while ``MemAvailable`` covers what the build is known to need
  (:data:`NEED_MB`, measured here), unless no other build holds a slot: one build always runs, so a host whose
  memory is taken by someone else still makes progress (the build may then be OOM-killed; that kill is the
  machine's, :mod:`musaenv.toolchains.faults`, retried and never sealed).

Waiting here is not the build's time: the builder's CPU limit and backstop start when it is launched. A wait is
logged when it begins and every 30 s while it lasts.

Two more starts use the same machinery (same rule, their own need):

* **Candidate runs** (``family="run"``: their own ``run-slot-<i>.lock`` files, two per core, so a run never
  waits for a build slot nor a build for a run): an evaluation's correctness trials, timing and reference run
  hold a run slot, taken where the candidate worker waits for its go-ahead (:mod:`musaenv.evaluator.candidate`),
  so the wait is not the candidate's time. Its need is two workers (candidate and reference), each
  :data:`NEED_MB` ``worker`` plus what the task's reference was measured to add at its peak (:func:`run_need_mb`).
* **Background header builds** (:func:`try_admit`): taken only when a build slot is free *and* memory covers the
  need at once, never by the one-always-runs rule; otherwise the background build is skipped (a later build that
  misses the header asks again). They are an optimisation, so they give way instead of waiting.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from musaenv import _env

__all__ = ["NEED_MB", "admitted", "mem_available_mb", "release", "run_need_mb", "slot_count", "try_admit"]

log = logging.getLogger(__name__)

#: Peak resident memory of one build's heaviest compiler, by kind (MB). ``cxx``: one C++ unit including
#: ``torch/extension.h`` at ``-O3`` (cc1plus, g++ 12, torch 2.13): 1,497 MB measured with ``/usr/bin/time -v``
#: here; a builder may run its binding unit and its kernel unit at once, but the binding unit of the fast tier is
#: cached and the PCH tier's units share the header's pages, so one unit's peak is the need. ``cuda``: nvcc's host
#: pass over the same headers is the same cc1plus; a plain kernel unit takes 184 MB, so the C++ figure covers both.
#: ``worker``: a worker process that imported torch and the worker module and ran a small matmul: VmRSS 233 MB
#: (155 MB private) measured here for a fresh interpreter; a forked one shares most of it with its fork server, so
#: 250 MB bounds one worker before its task's own data.
NEED_MB = {"cxx": 1500, "cuda": 1500, "light": 300, "worker": 250}
_PREFIX = {"build": "slot", "run": "run-slot"}  # lock file names per family (builds keep their original names)
#: Slots per core: a build is one compiler on one core; a run is a candidate worker and a reference worker, whose
#: timing a device slot already serialises per evaluator, so two per core (as the memory budget's host share counts).
_PER_CORE = {"build": 1, "run": 2}
_POLL_S = 0.25
_LOG_EVERY_S = 30.0


def mem_available_mb() -> float | None:
    """``MemAvailable`` of ``/proc/meminfo`` in MB (``None`` where the kernel does not report it)."""
    return _meminfo("MemAvailable:")


def _reader() -> Callable[[], float | None]:
    """The memory reading used when none is given (looked up at each call, so tests can replace it)."""
    return mem_available_mb


def _meminfo(field: str) -> float | None:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field))
    except (OSError, StopIteration, ValueError):
        return None


def slot_count(need_mb: float, per_core: int = 1) -> int:
    """Builds (``per_core`` 1) or runs (2) admitted at once on this machine: ``per_core`` per core, no more than its
    total memory holds."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    total = _meminfo("MemTotal:")
    by_memory = int(total // need_mb) if total else cores
    return max(1, min(per_core * cores, by_memory))


def run_need_mb(task_peak_mb: float | None) -> float:
    """Memory one evaluation's run needs: its candidate and reference workers, each a worker's own footprint plus
    what the task's reference added at its peak (unknown before its first run: the footprint alone)."""
    return 2 * (NEED_MB["worker"] + max(0.0, task_peak_mb or 0.0))


def _admission_dir() -> Path:
    d = _env.key_dir() / "admission"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _others_idle(paths: list[Path], mine: Path) -> bool:
    """True when no other slot is held (each other lock can be taken, and is released at once)."""
    for p in paths:
        if p == mine:
            continue
        fd = _try_lock(p)
        if fd is None:
            return False
        os.close(fd)
    return True


def _slot_paths(root: Path, family: str, need: float) -> list[Path]:
    return [root / f"{_PREFIX[family]}-{i}.lock" for i in range(slot_count(need, _PER_CORE[family]))]


@contextlib.contextmanager
def admitted(
    kind: str,
    what: str = "",
    *,
    need_mb: float | None = None,
    family: str = "build",
    available: Callable[[], float | None] | None = None,
    root: Path | None = None,
) -> Iterator[float]:
    """Hold a machine-wide slot while the body runs; yields the seconds spent waiting for it.

    Args:
        kind: A key of :data:`NEED_MB` (``cxx``, ``cuda``, ``light``, ``worker``): the need unless ``need_mb``.
        what: The build's (or run's) name, for the wait's log lines.
        need_mb: The memory needed, when known better than by kind (a run: :func:`run_need_mb`).
        family: ``build`` or ``run``: whose slots (each family has its own lock files).
        available: Reads the memory available now in MB (default :func:`mem_available_mb`; injected by tests).
        root: The directory of the slot locks (default: ``admission`` in the parent-only key directory).
    """
    need = need_mb if need_mb is not None else NEED_MB.get(kind, NEED_MB["cxx"])
    available = available or _reader()
    root = root or _admission_dir()
    paths = _slot_paths(root, family, need)
    noun = "build" if family == "build" else "run"
    start = time.monotonic()
    next_log = start  # the first wait is said at once, then every 30 s
    while True:
        why = f"all {len(paths)} {noun} slots on this machine are busy"
        for p in paths:
            fd = _try_lock(p)
            if fd is None:
                continue
            mem = available()
            if mem is None or mem >= need or _others_idle(paths, p):
                waited = time.monotonic() - start
                if waited >= _LOG_EVERY_S:
                    log.info("%s %s admitted after %.0f s waiting for memory or a slot", noun, what, waited)
                try:
                    yield waited
                finally:
                    os.close(fd)  # closing the descriptor drops the lock
                return
            os.close(fd)
            why = f"{mem:.0f} MB available < {need:.0f} MB needed while another {noun} runs"
        if time.monotonic() >= next_log:
            log.info("%s %s waits: %s", noun, what, why)
            next_log = time.monotonic() + _LOG_EVERY_S
        time.sleep(_POLL_S)


def try_admit(
    kind: str, what: str = "", *, available: Callable[[], float | None] | None = None, root: Path | None = None
) -> int | None:
    """A build slot taken now, or ``None``: for background builds, which give way instead of waiting.

    Admitted only when a slot is free and ``MemAvailable`` covers the need (no one-always-runs rule). The returned
    descriptor holds the slot until :func:`release` (or until this process ends).
    """
    need = NEED_MB.get(kind, NEED_MB["cxx"])
    mem = (available or _reader())()
    if mem is not None and mem < need:
        log.info("background build %s skipped: %.0f MB available < %d MB needed", what, mem, need)
        return None
    for p in _slot_paths(root or _admission_dir(), "build", need):
        fd = _try_lock(p)
        if fd is not None:
            return fd
    log.info("background build %s skipped: every build slot on this machine is busy", what)
    return None


def release(fd: int | None) -> None:
    """Give back a slot taken by :func:`try_admit` (``None``: nothing held)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
