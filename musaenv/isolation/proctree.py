"""Process-tree helpers for the parent of a worker: find, count and kill what a worker started.

Process facts (start times, CPU seconds, threads) come from :mod:`psutil`; parents, groups and sessions from
``/proc`` directly (:func:`descendants`, :func:`_snapshot`: psutil's per-process objects cost 2.5x). Kept here,
because psutil has no such thing: the freeze-then-kill of a whole tree, process group and session
(:func:`kill_tree`; psutil kills one process at a time and knows no process groups or sessions), and the count of
a process's sockets in *its own* network namespace (:func:`open_inet_sockets`; psutil reads the caller's
``/proc/net`` tables, and a sandboxed worker has a namespace of its own).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import NamedTuple

import psutil

__all__ = ["cpu_seconds", "descendants", "is_zombie", "kill_tree", "open_inet_sockets", "start_time", "thread_count"]

_PROC = Path("/proc")


class _Stat(NamedTuple):
    ppid: int
    pgrp: int
    session: int


def start_time(pid: int) -> float | None:
    """When the process started (tells it apart from a later one that reuses its pid); ``None`` when it is gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, all its threads together, exited ones included (10 ms resolution:
    the kernel counts clock ticks); ``None`` when it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess:
        return None
    return float(t.user + t.system)


def _snapshot() -> dict[int, _Stat]:
    """Every process's parent, group and session, from one read of each ``/proc/<pid>/stat`` (fields 4-6)."""
    out: dict[int, _Stat] = {}
    for name in os.listdir(_PROC):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):  # gone since it was listed
                text = (_PROC / name / "stat").read_bytes()
                ppid, pgrp, session = text[text.rindex(b")") + 2 :].split(None, 4)[1:4]
                out[int(name)] = _Stat(int(ppid), int(pgrp), int(session))
    return out


def _descendants_in(pid: int, snap: dict[int, _Stat]) -> list[int]:
    children: dict[int, list[int]] = {}
    for p, st in snap.items():
        children.setdefault(st.ppid, []).append(p)
    found: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, ()))
    return sorted(found)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), including ones that called ``setsid``.

    A process whose parent already exited was re-parented (to init or a subreaper) and is no longer found here;
    see :func:`kill_tree` for how that gap is narrowed. Read from each thread's ``children`` list in ``/proc`` where
    the kernel keeps one (``CONFIG_PROC_CHILDREN``): the cost grows with the tree, not with the host (the stage
    clocks ask on every reading, and a training host runs thousands of processes); else from one pass over every
    process's ``stat``. Measured on a loaded 2-core host with 110 processes: psutil's recursive ``children`` (used
    before) 14.8 ms whatever the tree, the lists 0.17 ms for a one-process tree, the ``stat`` pass 8.8 ms.

    Args:
        pid: Root of the tree (not included in the result).

    Returns:
        Sorted pids; empty when ``pid`` has no children or does not exist.
    """
    if not _HAS_CHILDREN_LISTS:
        return _descendants_in(pid, _snapshot())
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return sorted(set(found))


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a child belongs to the thread that started it)."""
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(_PROC / str(pid) / "task"):
            with contextlib.suppress(OSError, ValueError):
                kids += [int(c) for c in (_PROC / str(pid) / "task" / tid / "children").read_bytes().split()]
    return kids


_HAS_CHILDREN_LISTS = (_PROC / "self" / "task" / str(os.getpid()) / "children").exists()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def is_zombie(pid: int) -> bool:
    """Whether ``pid`` exited and was not reaped by its parent yet (``False`` once it is gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _members(root: int, snap: dict[int, _Stat]) -> set[int]:
    """The root, its descendants and everyone in its process group or session (root = pgid = sid of a worker)."""
    found = set(_descendants_in(root, snap))
    found.update(p for p, st in snap.items() if st.pgrp == root or st.session == root)
    if root in snap:
        found.add(root)
    return found


def kill_tree(pid: int, sig: int = signal.SIGKILL, *, timeout_s: float = 2.0) -> list[int]:
    """Signal a worker, its process group and session, and every descendant, then wait for them to die.

    Each process found is first stopped (SIGSTOP), and the tree is scanned again until no new process appears, so a
    fork bomb cannot outrun the scan; only then is ``sig`` sent to all of them (and to the process group ``pid``).
    A grandchild that called ``setsid`` is still found through its parent. Not found: a process whose parent exited
    before the first scan (a double fork) unless it stayed in the group or session; make the caller a child
    subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``) or use a cgroup to close that gap.

    The caller still has to reap its own child (``Popen.wait()``); other zombies are reaped by their new parent.

    Args:
        pid: The worker's pid; with ``start_new_session=True`` it is also its process-group and session id.
        sig: Signal to send (``SIGKILL`` by default). Stopped processes get ``SIGCONT`` after a catchable signal.
        timeout_s: How long to wait for the processes to exit (they count as gone once they are zombies).

    Returns:
        Sorted pids that were signalled (the caller's own pid and process group are never touched).
    """
    me = os.getpid()
    targets: set[int] = set()
    for _ in range(8):  # rounds until no new process shows up
        new = _members(pid, _snapshot()) - targets - {me}
        if not new:
            break
        for p in new:
            _signal(p, signal.SIGSTOP)
        targets |= new
    if pid != os.getpgid(0):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
    for p in targets:
        _signal(p, sig)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            _signal(p, signal.SIGCONT)  # a stopped process would not act on a catchable signal
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(_gone(p) for p in targets):
        time.sleep(0.01)
    return sorted(targets)


def thread_count(pid: int | None = None) -> int:
    """Number of threads of a process; ``None`` means this process.

    Raises:
        ProcessLookupError: The process does not exist.
    """
    try:
        return int(psutil.Process(pid).num_threads())
    except psutil.NoSuchProcess as exc:
        raise ProcessLookupError(f"no process {pid}") from exc


def _inet_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        try:
            lines = (_PROC / str(pid) / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue  # the table is absent when the protocol is not built in
        inodes.update(line.split()[9] for line in lines if len(line.split()) > 9)
    return inodes


def open_inet_sockets(pid: int) -> int:
    """Count the IPv4/IPv6 sockets (TCP, UDP, raw) that process ``pid`` holds open.

    Matches the ``socket:[inode]`` targets of ``/proc/<pid>/fd/*`` against the inodes listed in the process's own
    network namespace (``/proc/<pid>/net/tcp`` etc.). A TCP socket is listed by the kernel only once it listens or
    connects, so one that was merely created (or only bound) is not counted. Needs the process's uid (or root).

    Raises:
        ProcessLookupError: The process does not exist.
        PermissionError: Its fds cannot be read.
    """
    fd_dir = _PROC / str(pid) / "fd"
    if not fd_dir.exists():
        raise ProcessLookupError(f"no process {pid}")
    inodes = _inet_inodes(pid)
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue  # closed between listdir and readlink
        if target.startswith("socket:[") and target[8:-1] in inodes:
            count += 1
    return count
