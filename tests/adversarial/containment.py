"""Containment checks after a hostile evaluation: no process left behind, no file outside the sandbox, no connection.

The test process makes itself a child subreaper, so a process that a worker started and orphaned (a double fork, a
``setsid`` daemon) is re-parented to the test process instead of init, and :func:`stray_processes` still sees it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from musaenv.evaluator import awake
from musaenv.evaluator.local import LocalEvaluator
from musaenv.isolation.proctree import descendants, is_zombie
from musaenv.toolchains.warmup import background_tree

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux >= 3.4); False when refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def _worker_pids(evaluators: list[LocalEvaluator]) -> set[int]:
    """The evaluators' own idle processes: the spare candidate worker, the reference worker, the fork servers, and
    the awake keepers parked between timing phases."""
    pids: set[int] = awake.parked_pids()
    for ev in evaluators:
        for worker in (ev._spare, ev._reference._worker):  # the harness's own processes, not the candidate's
            if worker is not None and worker.poll() is None:
                pids.add(worker.pid)
        for server in (ev._server, ev._reference.fork_server):
            if server is not None and server.alive:
                pids.add(server.proc.pid)
    return pids


def stray_processes(evaluators: list[LocalEvaluator]) -> list[int]:
    """Live (non-zombie) processes below this one that are not an evaluator's idle worker."""
    known = _worker_pids(evaluators) | background_tree()  # a header build for later candidates is ours and ends
    strays = []
    for pid in descendants(os.getpid()):
        if pid in known or is_zombie(pid) or not Path(f"/proc/{pid}").exists():  # exited meanwhile
            continue
        strays.append(pid)
    return strays


@dataclass
class Traps:
    """Bait the hostile candidates aim at: a path outside the sandbox, a path in the build cache, a listening port."""

    pwned_path: Path
    cache_path: Path
    listener: socket.socket

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def subs(self) -> dict[str, str]:
        """Placeholder values for :func:`tests.adversarial.hostile_kernels.render`."""
        return {"PWNED_PATH": str(self.pwned_path), "CACHE_PATH": str(self.cache_path), "PORT": str(self.port)}

    def connections(self) -> int:
        """Connections that reached the listener since it was opened (accepted and closed here)."""
        count = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, TimeoutError):
                return count
            conn.close()
            count += 1

    def breaches(self) -> list[str]:
        """Every way the sandbox leaked; empty when contained."""
        found = [f"{p} exists" for p in (self.pwned_path, self.cache_path) if p.exists()]
        n = self.connections()
        if n:
            found.append(f"{n} connection(s) reached 127.0.0.1:{self.port}")
        return found


@contextlib.contextmanager
def traps(cache_dir: Path) -> Iterator[Traps]:
    """Open the bait (a fresh uuid per test session) and clean it up afterwards."""
    tag = uuid.uuid4().hex
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    t = Traps(Path(f"/tmp/musaenv_pwned_{tag}"), cache_dir / f"musaenv_pwned_{tag}", listener)
    try:
        yield t
    finally:
        listener.close()
        for p in (t.pwned_path, t.cache_path):
            with contextlib.suppress(OSError):
                p.unlink()
