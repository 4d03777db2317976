"""Parent-side handle of one worker process."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from musaenv import _env
from musaenv.isolation import tempdirs
from musaenv.isolation.channel import Channel, ProtocolError, Stalled
from musaenv.isolation.forkserver import ForkServer, ForkServerError
from musaenv.isolation.messages import read_hello
from musaenv.isolation.proctree import kill_tree, start_time

__all__ = ["STEADY_MALLOC", "WorkerProcess", "allocator_env", "worker_env"]

log = logging.getLogger(__name__)


#: glibc malloc settings that keep a worker's calls on the same pages (``TimingConfig.allocator="steady"``). By
#: default glibc moves its mmap threshold as blocks are freed and trims its heap, so a multi-op reference's 4-16 MB
#: intermediates are fresh mappings (page faults, zeroing: CPU time in the call) on some calls and reused heap on
#: others; measured on the fused chain of benchmarks/fused/, per-evaluation speedup intervals 0.27-1.12 wide
#: against 0.22-0.45 with these (docs/scaling.md). Blocks of 32 MiB and more are still mapped and returned.
STEADY_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
    "MALLOC_TOP_PAD_": str(64 << 20),
}


def allocator_env(allocator: str) -> dict[str, str]:
    """The environment variables of ``allocator`` (``steady`` or ``system``) that the user has not set."""
    if allocator != "steady":
        return {}
    return {k: v for k, v in STEADY_MALLOC.items() if k not in os.environ}


def worker_env(cpu_threads: int, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker process (and of the fork server that starts workers)."""
    env = _env.child_env(cpu_threads)
    env.update(extra_env or {})
    return env


def _start_interpreter(
    role: str, fds: tuple[int, int], log_file: IO[bytes], workdir: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "musaenv.worker.candidate", "--rfd", str(fds[0]), "--wfd", str(fds[1])]
    return subprocess.Popen(
        [*cmd, "--role", role, "--parent", str(os.getpid())],
        pass_fds=fds,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=str(workdir),
        env=env,
    )


class WorkerProcess:
    """A worker subprocess in its own session, with a private working directory and channel.

    Args:
        role: ``candidate`` or ``reference``.
        cpu_threads: Thread count for OpenMP/MKL/torch inside the worker.
        extra_env: Extra environment variables (e.g. ``TRITON_INTERPRET=1`` for Triton without a GPU).
        fork_server: Fork the worker from this server (started with :func:`worker_env` of the same arguments)
            instead of starting a fresh interpreter; falls back to a fresh interpreter if the server fails.
    """

    def __init__(
        self,
        role: str,
        cpu_threads: int = 1,
        extra_env: dict[str, str] | None = None,
        fork_server: ForkServer | None = None,
    ) -> None:
        self.role = role
        self.workdir = tempdirs.make(role)
        self.chan, (cr, cw) = Channel.pair()
        self._log = open(self.workdir / "worker.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc: subprocess.Popen[bytes] | None = None
        self._server: ForkServer | None = None
        try:
            if fork_server is not None:
                try:
                    self.pid = fork_server.spawn(role, cr, cw, self._log.fileno(), str(self.workdir))
                    self._server, self._birth = fork_server, start_time(self.pid)
                except ForkServerError as e:
                    log.warning("fork server failed (%s); starting a fresh worker interpreter instead", e)
            if self._server is None:
                self.proc = _start_interpreter(
                    role, (cr, cw), self._log, self.workdir, worker_env(cpu_threads, extra_env)
                )
                self.pid = self.proc.pid
        finally:
            os.close(cr)
            os.close(cw)
        self.ready = False
        self.start_error = ""  # why the worker's hello was refused (another protocol version), if it was
        self._status_lost = False
        self.started = time.monotonic()

    @property
    def forked(self) -> bool:
        """True when the worker came from a fork server."""
        return self._server is not None

    @property
    def server_died(self) -> bool:
        """True when the worker's fork server has ended (a forked worker dies with it: ``PR_SET_PDEATHSIG``)."""
        return self._server is not None and self._server.proc.poll() is not None

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or ``None`` while it runs (or when unknowable)."""
        if self.proc is not None:
            return self.proc.poll()
        assert self._server is not None
        try:
            return self._server.returncode(self.pid)
        except ForkServerError:  # the server died: alive or not, the exit status is lost
            if self._same_process():
                return None
            self._status_lost = True
            return 1

    def _same_process(self) -> bool:
        birth = start_time(self.pid)
        return birth is not None and birth == self._birth

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait for the worker's hello (torch imported); False on timeout, death or a refused hello
        (:attr:`start_error` then says why: e.g. a worker of another protocol version)."""
        if self.ready:
            return True
        remaining = timeout_s - (time.monotonic() - self.started)
        try:
            if self.chan.poll(max(remaining, 0.0)):
                end = self.started + timeout_s
                msg, _ = self.chan.recv(lambda: "start timeout" if time.monotonic() > end else None)
                read_hello(msg)
                self.ready = True
        except ProtocolError as e:
            self.start_error = str(e)
            return False
        except (EOFError, OSError, Stalled):
            return False
        return self.ready

    def exit_description(self, wait_s: float = 2.0) -> str:
        """How the process ended (signal name or exit code), waiting briefly for it."""
        deadline = time.monotonic() + wait_s
        rc = self.poll()
        while rc is None and time.monotonic() < deadline:
            time.sleep(0.01)
            rc = self.poll()
        if rc is None:
            return "the worker stopped answering"
        if self._status_lost:
            return "the worker ended (its exit status was lost when the fork server stopped)"
        if rc < 0:
            try:
                return f"the worker was killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"the worker was killed by signal {-rc}"
        return f"the worker exited with code {rc}"

    def log_tail(self, chars: int = 3000) -> str:
        """The last characters the worker (and the candidate) printed."""
        try:
            self._log.flush()
            return (self.workdir / "worker.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """Kill the worker and everything it started (its session and any escaped descendants)."""
        if self._server is not None:
            # While the server lives the pid stays reserved (unreaped) until released; otherwise check identity.
            if self._server.alive or self._same_process():
                kill_tree(self.pid)
            self._server.release(self.pid)
            return
        assert self.proc is not None
        kill_tree(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def close(self) -> None:
        """Kill the process, close the channel, remove the working directory."""
        self.kill()
        self.chan.close()
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
