"""A candidate's run is admitted by memory across processes (#27 item 2): short of memory while another run holds a
slot, an evaluation waits before its trials (not charged to the candidate) and is judged normally once admitted."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.toolchains import admission
from musaenv.types import Stage

pytestmark = pytest.mark.slow

_HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


class _Waits(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if line.startswith("run ") and " waits: " in line:
            self.lines.append(line)
            self.seen.set()


def test_short_memory_holds_a_run_until_the_other_run_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission, "_admission_dir", lambda: tmp_path)  # slots of our own, not this host's
    monkeypatch.setattr(admission, "mem_available_mb", lambda: 1.0)  # the host looks nearly full
    other = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / "run-slot-0.lock")], stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    assert other.stdout is not None and other.stdout.readline().strip() == "held"
    waits = _Waits()
    logger = logging.getLogger(admission.__name__)
    level = logger.level
    logger.addHandler(waits)
    logger.setLevel(logging.INFO)

    def release_when_waited() -> None:  # the other run ends once this one is seen waiting for it
        waits.seen.wait(600)
        other.kill()

    releaser = threading.Thread(target=release_when_waited, daemon=True)
    releaser.start()
    try:
        with LocalEvaluator("cpu") as ev:
            result = ev.evaluate(get_task("l1_relu"), solution_source("l1_relu"))
    finally:
        waits.seen.set()
        other.kill()
        other.wait()
        logger.removeHandler(waits)
        logger.setLevel(level)
    assert waits.lines and "MB available <" in waits.lines[0] and "while another run runs" in waits.lines[0], (
        waits.lines
    )
    assert result.stage is Stage.CORRECT, result.messages  # the wait was not the candidate's time
