"""Process-tree helpers for the parent of a worker: find, count and kill what a worker started.

Pure Python over Linux ``/proc``. The kernel here has no ``/proc/<pid>/task/<tid>/children`` (it needs
CONFIG_PROC_CHILDREN), so the tree is rebuilt from the parent pid in every ``/proc/<pid>/stat``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import NamedTuple

__all__ = ["cpu_seconds", "descendants", "kill_tree", "open_inet_sockets", "start_time", "thread_count"]

_PROC = Path("/proc")


class _Stat(NamedTuple):
    state: str
    ppid: int
    pgrp: int
    session: int


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of ``/proc/<pid>/stat`` (``None`` when the process is gone)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')' (proc(5)).
    return text[text.rindex(")") + 2 :].split()


def _read_stat(pid: int) -> _Stat | None:
    fields = _stat_fields(pid)
    return None if fields is None else _Stat(fields[0], int(fields[1]), int(fields[2]), int(fields[3]))


def start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat``: tells a process apart from a later one that reuses its pid."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[19]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, all its threads together, exited ones included (fields 14-15 of
    ``/proc/<pid>/stat``, in clock ticks: 10 ms resolution); ``None`` when it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _snapshot() -> dict[int, _Stat]:
    out: dict[int, _Stat] = {}
    for entry in os.listdir(_PROC):
        if entry.isdigit():
            st = _read_stat(int(entry))
            if st is not None:
                out[int(entry)] = st
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
    see :func:`kill_tree` for how that gap is narrowed.

    Args:
        pid: Root of the tree (not included in the result).

    Returns:
        Sorted pids; empty when ``pid`` has no children or does not exist.
    """
    return _descendants_in(pid, _snapshot())


def _gone(pid: int) -> bool:
    st = _read_stat(pid)
    return st is None or st.state in ("Z", "X")


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
    """Number of threads of a process (``Threads:`` in ``/proc/<pid>/status``); ``None`` means this process.

    Raises:
        ProcessLookupError: The process does not exist.
    """
    path = _PROC / ("self" if pid is None else str(pid)) / "status"
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise ProcessLookupError(f"no process {pid}") from exc
    for line in text.splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise ProcessLookupError(f"no Threads line in {path}")


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
