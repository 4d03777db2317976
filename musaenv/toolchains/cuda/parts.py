"""The CUDA split build's compiles in flight: nvcc on the kernels watched on a thread, the host side stopped at once
when it fails.

The split (:mod:`musaenv.toolchains.cuda.fast`) compiles its device unit (nvcc on the kernels, no torch header:
about a second) while the host side builds: g++ on the launchers, and ``main.cpp`` with any binding object new to
the header store through the C++ fast path (10-50 CPU s). A device compile that fails decides the build whatever the
host side does (its errors are the verdict when they are the candidate's own, :func:`device_verdict
<musaenv.toolchains.cuda.fast.device_verdict>`; otherwise the source is built as written), so :class:`DeviceWatch`
stops the host side's compilers the moment nvcc ends without success (their process groups killed through the
build's :class:`~musaenv.toolchains.stopping.StopScope`; a binding object they were writing is never renamed into
the store) and judges nvcc's output after. A kernel's own error then costs the device compile and the judgement,
not the host side (measured: docs/scaling.md, section 1c).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from musaenv.toolchains.cuda.compile import _finish, _start, _Step
from musaenv.toolchains.stopping import StopScope

__all__ = ["Abandon", "DeviceWatch", "Verdict", "await_parts", "start_in"]


class Abandon(Exception):
    """A part failed: the source is built as written instead (its output is the verdict)."""


class Verdict(Abandon):
    """The device compile failed with the candidate's own errors (``device_verdict``): that is the verdict."""

    def __init__(self, step: _Step, output: str) -> None:
        super().__init__(output)
        self.step, self.output = step, output


def start_in(scope: StopScope, step: _Step, tmp: Path) -> bool:
    """Start ``step`` in ``scope`` (killed when it stops); False when it has stopped already (not started)."""

    def start() -> Any:
        _start(step, tmp)
        return step.proc

    return scope.spawn(start)


class DeviceWatch:
    """Waits on the device compile (``parts[0]``, started) on a thread of its own; when it ends other than with
    exit 0 (an error, killed, past its CPU seconds or the backstop) it stops ``scope`` at once, then judges the
    output of an nvcc that ran to its end with ``judge`` (``None``: not the candidate's own).

    :meth:`verdict` (the build's thread) waits for that and raises it; :meth:`close` ends the compile and the thread.
    """

    def __init__(
        self, device: _Step, tmp: Path, deadline: float, scope: StopScope, judge: Callable[[str], str | None]
    ) -> None:
        self.device, self.scope = device, scope
        self._own: str | None = None
        self._error: BaseException | None = None
        self._recorded = False
        self._thread = threading.Thread(target=self._watch, args=(tmp, deadline, judge), daemon=True)
        self._thread.start()

    def _watch(self, tmp: Path, deadline: float, judge: Callable[[str], str | None]) -> None:
        d = self.device
        try:
            _finish(d, tmp, deadline)
            if d.returncode == 0:
                return
            status = "timed out" if d.timed_out else f"exit {d.returncode}"
            self.scope.stop(f"the device compile ended first ({status}): the host side cannot change the outcome")
            if d.returncode is not None and d.returncode > 0:  # only an nvcc that ran to its end is judged
                self._own = judge(d.output)
        except BaseException as e:  # raised again on the build's thread by verdict()
            self._error = e
            self.scope.stop(f"the device compile's watch failed ({type(e).__name__})")

    def verdict(self, steps: list[dict[str, Any]]) -> None:
        """Wait for the device compile and its judgement (recorded in ``steps`` once); raise :class:`Verdict` for
        the candidate's own errors, :class:`Abandon` for any other end than success."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        d = self.device
        if not self._recorded:
            self._recorded = True
            steps.append(d.record())
        if self._own is not None:
            raise Verdict(d, self._own)
        if d.returncode != 0:
            raise Abandon(f"device: {d.output[-400:]}")

    def close(self) -> None:
        """End the device compile if it still runs (its process group) and wait for the thread."""
        proc = self.device.proc
        if self._thread.is_alive() and proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._thread.join()


def await_parts(watch: DeviceWatch, host: _Step, tmp: Path, deadline: float, steps: list[dict[str, Any]]) -> None:
    """Wait for the device compile (its verdict first: :meth:`DeviceWatch.verdict`) and the host compile; abandon
    the split when the host compile failed, or never started (the scope had stopped)."""
    watch.verdict(steps)
    if host.proc is None:
        raise Abandon(f"host: not started ({watch.scope.reason})")
    if host.returncode is None and not host.timed_out:
        _finish(host, tmp, deadline)
        watch.scope.release(host.proc.pid)
        steps.append(host.record())
    if host.returncode != 0:
        raise Abandon(f"host: {host.output[-400:]}")
