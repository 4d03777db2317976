"""Parent side of the shape-probe worker: one subprocess that runs reference programs at candidate shapes. No torch.

The worker (:mod:`musaenv.worker.shape_probe`) imports torch once and serves many files, so deriving shapes for
a 250-file folder pays for one interpreter start, not 250. A file that hangs past the hard deadline, exhausts the
worker's address space or kills it costs a restart, never the caller: the caller only reads JSON lines.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from musaenv import _env

__all__ = ["ProbeClient", "ProbeError"]

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # importing torch on a busy 2-core machine took up to ~10 s here; this is the hard stop
KILL_GRACE_S = 5.0  # the worker's own alarm should answer first; past this the process is killed
# The worker's alarm counts its CPU time; this backstop counts wall time, for a check that hangs without using the
# CPU. A busy host stretches wall time (3x at a load of 6 on 2 cores was seen), hence the factor.
BACKSTOP_FACTOR = 4.0


class ProbeError(Exception):
    """The probe worker could not answer (it died, hung or could not start)."""


class ProbeClient:
    """A lazily started shape-probe worker.

    Args:
        memory_mb: Address-space limit of the worker (``RLIMIT_AS``); 0 = none.
    """

    def __init__(self, memory_mb: int = 8192) -> None:
        self.memory_mb = memory_mb
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._source: str | None = None
        self.restarts = 0

    def _start(self) -> None:
        cmd = [sys.executable, "-m", "musaenv.worker.shape_probe", str(self.memory_mb)]
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_env.child_env(threads=1),
            start_new_session=True,  # its own process group: killed with whatever the program started
        )
        self._buf = b""
        self._source = None
        ready = self._read(START_TIMEOUT_S)
        if not ready.get("ready"):
            raise ProbeError(f"shape-probe worker did not start: {ready}")

    def _read(self, timeout_s: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._kill()
                raise ProbeError(f"no answer within {timeout_s:g} s (worker killed)")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self._proc.poll()
                self._kill()
                raise ProbeError(f"the worker died (exit status {code}; e.g. killed for memory or a crash)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _send(self, req: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(req) + "\n").encode())
            self._proc.stdin.flush()
        except OSError as e:
            self._kill()
            raise ProbeError(f"cannot write to the worker: {e}") from None
        return self._read(timeout_s)

    def load(self, source: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Execute ``source`` in the worker (skipped when it is the program already loaded)."""
        if self._source == source and self._proc is not None and self._proc.poll() is None:
            return {"ok": True}
        reply = self._send({"op": "load", "source": source}, timeout_s)
        self._source = source if reply.get("ok") else None
        return reply

    def check(
        self, source: str, shape: dict[str, Any], *, real: bool, limit_s: float, fresh: bool = False, **kw: Any
    ) -> dict[str, Any]:
        """Probe ``shape`` of ``source`` (see :mod:`musaenv.worker.shape_probe`); a dead worker is an error reply.

        ``fresh``: execute ``source`` anew for this check only (the program as shown), not the loaded one.
        """
        try:
            req = {"op": "check", "shape": shape, "real": real, "limit_s": limit_s, **kw}
            if fresh:
                req["source"] = source
            else:
                loaded = self.load(source, BACKSTOP_FACTOR * limit_s + KILL_GRACE_S)
                if not loaded.get("ok"):
                    return loaded
            return self._send(req, BACKSTOP_FACTOR * limit_s + KILL_GRACE_S)
        except ProbeError as e:
            self.restarts += 1
            return {"ok": False, "error": str(e), "kind": "worker"}

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        self._source = None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Stop the worker (idempotent)."""
        if self._proc is not None and self._proc.poll() is None and self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> ProbeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
