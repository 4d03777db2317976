"""Progress of a batch that a person waits for: a bar on a terminal, periodic log lines everywhere else.

A job under ``nohup`` or a scheduler has no terminal, so a tqdm bar shows nothing there; it gets a line every
``interval_s`` seconds instead (done/total, rate, ETA, verdict counts so far) and one at the end. The lines go to
the ``musaenv.progress`` logger at INFO; when logging is not configured at all they are written to stderr
directly (like :data:`logging.lastResort`, which only passes warnings), so they are never silently lost.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from typing import IO, Any

__all__ = ["Progress", "format_duration"]

log = logging.getLogger("musaenv.progress")

DEFAULT_INTERVAL_S = 30.0  # a log line every 30 s: readable in a scheduler's log, not a flood


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

    Args:
        total: Items expected.
        desc: What is being done (``evaluating``).
        enabled: False shows nothing.
        interval_s: Seconds between log lines when not on a terminal.
        stream: Where the bar (or the fallback lines) go; default ``sys.stderr``. The bar is used only when it is
            a terminal.
    """

    def __init__(
        self,
        total: int,
        desc: str = "evaluating",
        enabled: bool = True,
        interval_s: float = DEFAULT_INTERVAL_S,
        stream: IO[str] | None = None,
    ) -> None:
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.interval_s = interval_s
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.verdicts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._last_line = self._start
        self._last_done = -1  # items counted in the last line written
        self._bar: Any = None
        if enabled and _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="cand", file=self.stream, dynamic_ncols=True)

    def update(self, verdict: str | None = None, n: int = 1) -> None:
        """Count ``n`` finished items (with their verdict, when known)."""
        with self._lock:
            self.done += n
            if verdict is not None:
                self.verdicts[str(verdict)] += n
            if not self.enabled:
                return
            if self._bar is not None:
                self._bar.set_postfix_str(self._counts(), refresh=False)
                self._bar.update(n)
                return
            now = time.monotonic()
            if now - self._last_line >= self.interval_s:
                self._last_line, self._last_done = now, self.done
                self._emit(self.line())

    def line(self) -> str:
        """One line: ``evaluating: 40/200 (20%), 12.5/min, ETA 12m48s, elapsed 3m12s; correct=10 incorrect=30``."""
        elapsed = time.monotonic() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        eta = format_duration((self.total - self.done) / rate) if rate > 0 else "?"
        counts = self._counts()
        return (
            f"{self.desc}: {self.done}/{self.total}{pct}, {60 * rate:.1f}/min, ETA {eta}, "
            f"elapsed {format_duration(elapsed)}" + (f"; {counts}" if counts else "")
        )

    def _counts(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.verdicts.items()))

    def _emit(self, text: str) -> None:
        if log.hasHandlers():
            log.info(text)
        else:  # logging not configured: stderr, so a job without a terminal still shows its progress
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """End the bar, or write the final line (idempotent)."""
        with self._lock:
            if not self.enabled:
                return
            self.enabled = False
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
