"""Stopping evaluations at once (Ctrl-C, SIGTERM): kill the processes musaenv started, so their evaluations end.

A thread evaluating a candidate waits on its worker (or builder); Python delivers ``KeyboardInterrupt`` only to the
main thread, so without help a pool's ``close`` would wait for every running evaluation to finish (minutes for a
build or a busy candidate). :func:`kill_running` kills this process's workers and builders (each ends its
evaluation with some result at once, which is discarded); :func:`interrupted` tells a ``close`` running during
such an exception to take that path. Fork servers are left to their owners' ``close``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from musaenv.isolation.proctree import descendants, kill_tree

__all__ = ["interrupted", "kill_running"]

_PARTS = ("musaenv.worker.candidate", "musaenv.toolchains.builder", "musaenv.toolchains.triton_aot")
_SERVER = "musaenv.isolation.forkserver"


def interrupted() -> bool:
    """True while a ``KeyboardInterrupt`` or ``SystemExit`` is propagating (e.g. in a ``finally`` or ``__exit__``)."""
    return isinstance(sys.exc_info()[1], (KeyboardInterrupt, SystemExit))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def kill_running() -> int:
    """Kill every worker (forked or not) and builder below this process, with their trees; returns how many."""
    killed = 0
    for pid in descendants(os.getpid()):
        cmd = _cmdline(pid)
        forked_worker = _SERVER in cmd and _SERVER in _cmdline(_ppid(pid))
        if forked_worker or any(part in cmd for part in _PARTS):
            with contextlib.suppress(OSError):
                kill_tree(pid, timeout_s=0.5)
                killed += 1
    return killed
