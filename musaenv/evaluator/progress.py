"""Progress of a batch that a person waits for: a bar on a terminal, periodic log lines everywhere else.

A job under ``nohup`` or a scheduler has no terminal, so a tqdm bar shows nothing there; it gets a line every
``interval_s`` seconds instead (done/total, rate, ETA, verdict counts so far, what is running now) and one at the
end. A heartbeat thread writes that line even while no item finishes (a first build, a slow derivation), so such
a job is never silent for longer than ``interval_s``. On a terminal the bar is refreshed every second for the same
reason (its elapsed time and "running" text move). The lines go to the ``musaenv.progress`` logger at INFO; when
logging is not configured at all they are written to stderr directly (like :data:`logging.lastResort`, which only
passes warnings), so they are never silently lost. ``MUSAENV_PROGRESS_INTERVAL_S`` sets the default interval.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

__all__ = ["DEFAULT_INTERVAL_S", "Progress", "default_interval_s", "format_duration"]

log = logging.getLogger("musaenv.progress")

DEFAULT_INTERVAL_S = 30.0  # a log line every 30 s: readable in a scheduler's log, not a flood
BAR_REFRESH_S = 1.0
RUNNING_SHOWN = 3  # labels named in "running: ..."; the rest counted


def default_interval_s() -> float:
    """``MUSAENV_PROGRESS_INTERVAL_S`` when set (a positive number), else :data:`DEFAULT_INTERVAL_S`."""
    raw = os.environ.get("MUSAENV_PROGRESS_INTERVAL_S", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def format_duration(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``3725`` -> ``1h02m05s``."""
    s = max(0, round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m{sec:02d}s"
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


class Progress:
    """Thread-safe progress of ``total`` items, each ending with a verdict.

    Callers that know what is in flight say so with :meth:`working` (or :meth:`begin`/:meth:`end`); the lines and
    the bar then name it ("running: l1_relu, l2_gemm (+3)").

    Args:
        total: Items expected.
        desc: What is being done (``evaluating``).
        enabled: False shows nothing.
        interval_s: Seconds between log lines when not on a terminal, with or without an item finishing (the
            heartbeat); ``0`` writes a line at every update and no heartbeat. ``None``: :func:`default_interval_s`.
        stream: Where the bar (or the fallback lines) go; default ``sys.stderr``. The bar is used only when it is
            a terminal.
    """

    def __init__(
        self,
        total: int,
        desc: str = "evaluating",
        enabled: bool = True,
        interval_s: float | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.interval_s = default_interval_s() if interval_s is None else interval_s
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.verdicts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._last_line = self._start
        self._last_done = -1  # items counted in the last line written
        self._running: Counter[str] = Counter()
        self._bar: Any = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if enabled and _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="it", file=self.stream, dynamic_ncols=True)
        if enabled and (self._bar is not None or self.interval_s > 0):
            self._ticker = threading.Thread(target=self._tick, name="musaenv-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        """The heartbeat: a line (or a bar refresh) even while nothing finishes."""
        wait = BAR_REFRESH_S if self._bar is not None else min(self.interval_s, BAR_REFRESH_S)
        while not self._stop.wait(wait):
            with self._lock:
                if not self.enabled:
                    return
                if self._bar is not None:
                    self._bar.set_postfix_str(self._postfix(), refresh=False)
                    self._bar.refresh()
                elif time.monotonic() - self._last_line >= self.interval_s:
                    self._write_line()

    def begin(self, label: str) -> None:
        """Say that ``label`` (a task, a build) is running now."""
        with self._lock:
            self._running[label] += 1

    def end(self, label: str) -> None:
        """Say that ``label`` no longer runs (without counting an item: :meth:`update` does that)."""
        with self._lock:
            self._running[label] -= 1
            if self._running[label] <= 0:
                del self._running[label]

    @contextmanager
    def working(self, label: str) -> Iterator[None]:
        """``with progress.working("l1_relu"): ...``: ``label`` is named as running for the block's duration."""
        self.begin(label)
        try:
            yield
        finally:
            self.end(label)

    def update(self, verdict: str | None = None, n: int = 1) -> None:
        """Count ``n`` finished items (with their verdict, when known)."""
        with self._lock:
            self.done += n
            if verdict is not None:
                self.verdicts[str(verdict)] += n
            if not self.enabled:
                return
            if self._bar is not None:
                self._bar.set_postfix_str(self._postfix(), refresh=False)
                self._bar.update(n)
                return
            if time.monotonic() - self._last_line >= self.interval_s:
                self._write_line()

    def _write_line(self) -> None:
        self._last_line, self._last_done = time.monotonic(), self.done
        self._emit(self.line())

    def line(self) -> str:
        """One line: ``evaluating: 40/200 (20%), 12.5/min, ETA 12m48s, elapsed 3m12s; correct=10 incorrect=30;
        running: l1_relu``."""
        elapsed = time.monotonic() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        eta = format_duration((self.total - self.done) / rate) if rate > 0 else "?"
        extra = "; ".join(p for p in (self._counts(), self._now()) if p)
        return (
            f"{self.desc}: {self.done}/{self.total}{pct}, {60 * rate:.1f}/min, ETA {eta}, "
            f"elapsed {format_duration(elapsed)}" + (f"; {extra}" if extra else "")
        )

    def _counts(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.verdicts.items()))

    def _now(self) -> str:
        if not self._running:
            return ""
        names = list(self._running)
        more = f" (+{len(names) - RUNNING_SHOWN})" if len(names) > RUNNING_SHOWN else ""
        return "running: " + ", ".join(names[:RUNNING_SHOWN]) + more

    def _postfix(self) -> str:
        return "; ".join(p for p in (self._counts(), self._now()) if p)

    def _emit(self, text: str) -> None:
        if log.hasHandlers():
            log.info(text)
        else:  # logging not configured: stderr, so a job without a terminal still shows its progress
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """End the bar, or write the final line (idempotent); stops the heartbeat."""
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        with self._lock:
            if not self.enabled:
                return
            self.enabled = False
            self._running.clear()
            if self._bar is not None:
                self._bar.close()
            elif self.done != self._last_done:  # the last periodic line may already say it all
                self._emit(self.line())

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or exotic streams
        return False
