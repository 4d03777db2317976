"""Compiler processes of one build that another thread may stop at once.

The CUDA split (:mod:`musaenv.toolchains.cuda.fast`) compiles its host side (the launchers, ``main.cpp`` and any
binding object new to the header store: up to ~50 CPU s) while nvcc compiles the kernels (~1 s). When nvcc fails,
the host side's work is wasted whatever the verdict (the kernels' own error is the verdict, or the source is built
as written), so the thread that watches nvcc stops it: every process :func:`run_stoppable` started inside
:func:`stoppable` is killed with its whole process group, and any later call returns at once without starting one.
A stopped call returns :data:`STOPPED_RC` (negative, like any signal's death: callers treat it as a failure that
says nothing about the source, and remove their partial outputs as for any failed compile).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = ["STOPPED_RC", "StopScope", "current", "run_stoppable", "stoppable"]

STOPPED_RC = -int(signal.SIGKILL)
_SCOPE: contextvars.ContextVar[StopScope | None] = contextvars.ContextVar("musaenv_stop_scope", default=None)


class StopScope:
    """The process groups started in one scope; :meth:`stop` kills them and refuses new ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self.reason = ""

    def spawn(self, start: Callable[[], subprocess.Popen[bytes] | subprocess.Popen[str]]) -> bool:
        """Run ``start`` (a ``Popen`` in a new session) unless the scope is stopped; its group is killed by
        :meth:`stop` until :meth:`release`. False when stopped (nothing started)."""
        with self._lock:
            if self.reason:
                return False
            self._groups.add(start().pid)
            return True

    def release(self, pid: int) -> None:
        """The process ``pid`` was waited for: its group is no longer this scope's to kill."""
        with self._lock:
            self._groups.discard(pid)

    def stop(self, reason: str) -> None:
        """Kill every group started and not released; later :meth:`spawn` calls start nothing."""
        with self._lock:
            self.reason = self.reason or reason
            for pid in self._groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    @property
    def stopped(self) -> bool:
        return bool(self.reason)


def current() -> StopScope | None:
    """The scope of this context (a thread started with ``contextvars.copy_context().run`` shares it)."""
    return _SCOPE.get()


@contextlib.contextmanager
def stoppable(scope: StopScope) -> Iterator[StopScope]:
    """Within this block, :func:`musaenv.toolchains.cpp.compiler.run_tool` starts its processes in ``scope``."""
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def run_stoppable(
    scope: StopScope, cmd: Sequence[str], cwd: str, timeout_s: float, preexec: Callable[[], None] | None,
    env: Mapping[str, str] | None,
) -> tuple[int, str]:  # fmt: skip
    """``subprocess.run`` in ``scope``: its own process group (a compiler's children die with it), killed on
    timeout (exit 124, as :func:`~musaenv.toolchains.cpp.compiler.run_tool`) or when the scope stops
    (:data:`STOPPED_RC`)."""
    procs: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        procs.append(subprocess.Popen(
            list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            errors="replace", preexec_fn=preexec, env=None if env is None else dict(env), start_new_session=True,
        ))  # fmt: skip
        return procs[0]

    if not scope.spawn(start):
        return STOPPED_RC, f"[musaenv] not started: {scope.reason}\n"
    p = procs[0]
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return 124, (out or "") + (err or "") + f"\n{cmd[0]} timed out after {timeout_s:.0f} s"
    except BaseException:  # interrupted while waiting: the compiler does not outlive this call
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    finally:
        scope.release(p.pid)
    text = (out or "") + (err or "")
    if p.returncode < 0 and scope.stopped:
        return STOPPED_RC, text + f"\n[musaenv] stopped: {scope.reason}\n"
    return p.returncode, text
