"""Machine-wide admission: slots held across processes, memory checked, one build (or run) always let through;
candidate runs on slots of their own; background builds give way instead of waiting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from musaenv.toolchains.admission import NEED_MB, admitted, release, run_need_mb, slot_count, try_admit

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


def test_a_run_waits_for_memory_while_another_run_holds_a_slot(tmp_path: Path) -> None:
    """A candidate run needing more than is available waits for the other run to end; builds' slots do not
    count (a run never waits behind a compiler, nor the reverse)."""
    builds = [_hold(tmp_path / f"slot-{i}.lock", 5.0) for i in range(slot_count(NEED_MB["light"]))]
    other = _hold(tmp_path / "run-slot-0.lock", 1.5)
    try:
        t0 = time.monotonic()
        need = run_need_mb(700.0)
        with admitted("worker", "t", need_mb=need, family="run", available=lambda: need - 1, root=tmp_path) as waited:
            took = time.monotonic() - t0
        with admitted("worker", "t", need_mb=need, family="run", available=lambda: need, root=tmp_path) as again:
            assert again < 1.0  # enough memory, every build slot busy: admitted at once
    finally:
        other.wait()
        for p in builds:
            p.kill()
            p.wait()
    assert waited >= 0.8 and took >= 0.8, (waited, took)


def test_run_need_counts_two_workers_and_the_tasks_peak() -> None:
    assert run_need_mb(None) == 2 * NEED_MB["worker"]
    assert run_need_mb(1000.0) == 2 * (NEED_MB["worker"] + 1000.0)
    assert slot_count(NEED_MB["worker"], per_core=2) <= 2 * len(os.sched_getaffinity(0))


def test_background_admission_never_waits_and_never_goes_short(tmp_path: Path) -> None:
    assert try_admit("cxx", "bg", available=lambda: 1.0, root=tmp_path) is None  # alone, but short: skipped
    fd = try_admit("cxx", "bg", available=lambda: 10.0**6, root=tmp_path)
    assert fd is not None
    try:
        n = slot_count(NEED_MB["cxx"])
        others = [try_admit("cxx", "bg", available=lambda: 10.0**6, root=tmp_path) for _ in range(n)]
        assert others.count(None) == 1  # every slot held now (one by fd): the next is skipped, not queued
        for o in others:
            release(o)
    finally:
        release(fd)
    t0 = time.monotonic()
    with admitted("cxx", "t", available=lambda: 10.0**6, root=tmp_path) as waited:  # released: free again
        assert waited < 1.0 and time.monotonic() - t0 < 1.0
