"""Machine-wide build admission: slots held across processes, memory checked, one build always let through."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from musaenv.build.admission import NEED_MB, admitted, slot_count

_HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding one slot for ``seconds`` (as a build in another evaluator would)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_slots_are_bounded_by_cores_and_total_memory() -> None:
    assert slot_count(10**9) == 1  # no machine holds a petabyte build twice
    assert 1 <= slot_count(NEED_MB["cxx"]) <= len(os.sched_getaffinity(0))


def test_short_memory_waits_for_the_other_build_then_goes(tmp_path: Path) -> None:
    """Memory is short and another process's build holds a slot: this build waits until that one ends, then runs
    (alone, it always runs)."""
    other = _hold(tmp_path / "slot-0.lock", 1.5)
    try:
        t0 = time.monotonic()
        with admitted("light", "t", available=lambda: 0.0, root=tmp_path) as waited:
            took = time.monotonic() - t0
    finally:
        other.wait()
    assert waited >= 0.8 and took >= 0.8, (waited, took)


def test_enough_memory_admits_beside_another_build(tmp_path: Path) -> None:
    if slot_count(NEED_MB["light"]) < 2:
        pytest.skip("one build slot on this machine")
    other = _hold(tmp_path / "slot-0.lock", 5.0)
    try:
        with admitted("light", "t", available=lambda: 10.0**6, root=tmp_path) as waited:
            assert waited < 1.0
    finally:
        other.kill()
        other.wait()


def test_alone_a_build_runs_however_short_memory_is(tmp_path: Path) -> None:
    """Someone else's process took the memory: no build of ours runs, so this one goes (progress is guaranteed;
    an OOM kill that may follow is the machine's fault, retried)."""
    with admitted("cxx", "t", available=lambda: 1.0, root=tmp_path) as waited:
        assert waited < 1.0


def test_every_slot_busy_waits_even_with_memory(tmp_path: Path) -> None:
    n = slot_count(NEED_MB["light"])
    others = [_hold(tmp_path / f"slot-{i}.lock", 1.5) for i in range(n)]
    try:
        with admitted("light", "t", available=lambda: 10.0**6, root=tmp_path) as waited:
            assert waited >= 0.8
    finally:
        for p in others:
            p.wait()


def test_a_dead_holder_frees_its_slot(tmp_path: Path) -> None:
    n = slot_count(NEED_MB["light"])
    others = [_hold(tmp_path / f"slot-{i}.lock", 60.0) for i in range(n)]
    for p in others:
        p.kill()  # the kernel drops a killed process's locks: no stale count to clean up
        p.wait()
    with admitted("light", "t", available=lambda: 10.0**6, root=tmp_path) as waited:
        assert waited < 1.0
