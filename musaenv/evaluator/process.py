"""Parent-side handle of one worker process."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from musaenv import _env
from musaenv.evaluator.channel import Channel, ProtocolError

__all__ = ["WorkerProcess"]


class WorkerProcess:
    """A worker subprocess in its own session, with a private working directory and channel.

    Args:
        role: ``candidate`` or ``reference``.
        cpu_threads: Thread count for OpenMP/MKL/torch inside the worker.
        extra_env: Extra environment variables (e.g. ``TRITON_INTERPRET=1`` for Triton without a GPU).
    """

    def __init__(self, role: str, cpu_threads: int = 1, extra_env: dict[str, str] | None = None) -> None:
        self.role = role
        self.workdir = Path(tempfile.mkdtemp(prefix=f"musaenv-{role}-"))
        self.chan, (cr, cw) = Channel.pair()
        env = _env.child_env(cpu_threads)
        env.update(extra_env or {})
        self._log = open(self.workdir / "worker.log", "wb")  # noqa: SIM115 - closed in close()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "musaenv.evaluator.worker", "--rfd", str(cr), "--wfd", str(cw), "--role", role],
                pass_fds=(cr, cw),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=str(self.workdir),
                env=env,
            )
        finally:
            os.close(cr)
            os.close(cw)
        self.ready = False
        self.started = time.monotonic()

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait for the worker's hello (torch imported); False on timeout or death."""
        if self.ready:
            return True
        remaining = timeout_s - (time.monotonic() - self.started)
        try:
            if self.chan.poll(max(remaining, 0.0)):
                msg, _ = self.chan.recv()
                self.ready = msg.get("type") == "ready"
        except (EOFError, ProtocolError, OSError):
            return False
        return self.ready

    def exit_description(self, wait_s: float = 2.0) -> str:
        """How the process ended (signal name or exit code), waiting briefly for it."""
        try:
            rc = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return "the worker stopped answering"
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
        from musaenv.evaluator.proctree import kill_tree

        kill_tree(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def close(self) -> None:
        """Kill the process, close the channel, remove the working directory."""
        self.kill()
        self.chan.close()
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
