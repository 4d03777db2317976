"""Limits that measure the candidate, not the host: CPU seconds of a process tree, own time, wall-clock backstop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from musaenv.isolation import limits
from musaenv.isolation.limits import StageClock, has_schedstat, tree_cpu_seconds, watch_process
from musaenv.isolation.proctree import descendants
from musaenv.toolchains.loader import BuildSpec, build_extension

BUSY = [sys.executable, "-c", "while True: pass"]


def _popen(cmd: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture
def short_backstop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "BACKSTOP_FACTOR", 1.0)
    monkeypatch.setattr(limits, "BACKSTOP_EXTRA_S", 0.5)


def test_sleeping_tree_hits_only_the_backstop(short_backstop: None) -> None:
    proc = _popen(["sleep", "30"])
    t0 = time.monotonic()
    try:
        assert watch_process(proc, cpu_limit_s=1.0) == "backstop"
    finally:
        proc.kill()
        proc.wait()
    assert 1.4 < time.monotonic() - t0 < 5.0


def test_busy_grandchild_counts_against_the_tree() -> None:
    # the busy loop is a grandchild: only the tree's CPU seconds, not the shell's own, can see it
    proc = _popen(["sh", "-c", f"{sys.executable} -c 'while True: pass' & wait"])
    try:
        assert watch_process(proc, cpu_limit_s=0.8) == "cpu"
        assert (tree_cpu_seconds(proc.pid) or 0.0) > 0.8
    finally:
        for pid in descendants(proc.pid):
            os.kill(pid, 9)
        proc.kill()
        proc.wait()


def test_exit_before_any_limit() -> None:
    proc = _popen([sys.executable, "-c", "pass"])
    assert watch_process(proc, cpu_limit_s=30.0) is None and proc.returncode == 0


@pytest.mark.skipif(not has_schedstat(), reason="this kernel reports no run-queue delays")
def test_starved_worker_is_not_charged_for_the_wait() -> None:
    """Four busy loops share one CPU: each gets about a quarter of it, and own time discounts the run-queue wait."""
    cpu = max(os.sched_getaffinity(0))
    procs = [_popen(BUSY) for _ in range(4)]
    try:
        for p in procs:
            os.sched_setaffinity(p.pid, {cpu})
        clock = StageClock(procs[0].pid, limit_s=10.0)
        time.sleep(2.0)
        u = clock.usage()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert u["cpu_s"] < 0.6 * u["wall_s"], u  # it was starved
    assert u["own_s"] < 0.6 * u["wall_s"], u  # and own time says so
    assert u["own_s"] >= 0.8 * u["cpu_s"], u  # while still counting what it ran


_DEMOTED = """
import os, threading, time
def spin():
    {demote}
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
time.sleep(60)
"""


@pytest.mark.skipif(not has_schedstat(), reason="this kernel reports no run-queue delays")
@pytest.mark.parametrize(
    "demote",
    [
        "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))",
        "os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)",
    ],
    ids=["sched_idle", "nice_19"],
)
def test_a_thread_that_demoted_itself_cannot_make_a_hang_the_hosts(demote: str) -> None:
    """A hang beside a spinner that lowered its own priority, on a core busy with other work: the spinner waits on
    the run queue for nearly the whole stage. Its wait is its own choice, so the hang reaches the candidate's own
    limit (a timeout), not the backstop (the host's unscored infra_error)."""
    cpu = max(os.sched_getaffinity(0))
    busy = [_popen(BUSY) for _ in range(2)]
    proc = _popen([sys.executable, "-c", _DEMOTED.format(demote=demote)])
    try:
        for p in (*busy, proc):
            os.sched_setaffinity(p.pid, {cpu})
        time.sleep(0.5)  # the spinner has started and demoted itself
        clock = StageClock(proc.pid, limit_s=1.0)
        deadline = time.monotonic() + 10.0
        while (why := clock.over()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        u = clock.usage()
    finally:
        for p in (*busy, proc):
            p.kill()
            p.wait()
    assert why == "own", u
    assert u["own_s"] >= 0.8 * u["wall_s"], u


def test_sleeping_worker_is_charged() -> None:
    proc = _popen(["sleep", "30"])
    try:
        clock = StageClock(proc.pid, limit_s=0.5)
        time.sleep(0.8)
        assert clock.over() == "own"
        assert "own time" in clock.describe("trials", "own")
    finally:
        proc.kill()
        proc.wait()


def test_stopped_worker_reaches_only_the_backstop(short_backstop: None) -> None:
    """SIGSTOP from outside: its CPU time stops and so does its own time; only the wall-clock backstop ends it."""
    proc = _popen(["sleep", "30"])
    try:
        clock = StageClock(proc.pid, limit_s=0.5)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5.0
        while (why := clock.over()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert limits.is_stopped(proc.pid)
        assert why == "backstop", clock.usage()
        assert clock.usage()["own_s"] < 0.5, clock.usage()
    finally:
        proc.kill()
        proc.wait()


def test_a_stop_the_sandbox_could_not_refuse_is_the_workers_own_time(short_backstop: None) -> None:
    """Without seccomp_signals the worker may have stopped itself: the stop reaches its own limit, not the backstop."""
    proc = _popen(["sleep", "30"])
    try:
        clock = StageClock(proc.pid, limit_s=0.5, stops_are_own=True)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5.0
        while (why := clock.over()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert why == "own", clock.usage()
    finally:
        proc.kill()
        proc.wait()


def test_build_past_the_backstop_is_infra_error_and_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build the host stalls (here: a backstop shorter than the builder's start) is the harness's failure."""
    monkeypatch.setattr(limits, "BACKSTOP_FACTOR", 0.0)
    monkeypatch.setattr(limits, "BACKSTOP_EXTRA_S", 0.2)
    src = f"#include <torch/extension.h>\n// {uuid.uuid4().hex}\ntorch::Tensor f(torch::Tensor x) {{ return x; }}\n"
    spec = BuildSpec.from_load_inline({"cpp_sources": src, "functions": ["f"]}, "cpu")
    out = build_extension(spec, timeout_s=600.0, root=tmp_path)
    assert not out.ok and out.infra_error and out.timed_out, out
    assert "backstop" in out.log and "not the candidate" in out.log
    assert not (tmp_path / spec.name / "failed.json").exists()  # never cached as the candidate's compile error
    assert not list((tmp_path / "tmp").iterdir())


def test_a_worker_killed_at_its_limit_is_described_by_what_it_used() -> None:
    """The evaluator kills a worker at its limit, then writes the message: the numbers must be the living worker's
    (a dead one reads CPU 0 and its whole wall time as its own, what GPT-5 50's timeout said before)."""
    proc = _popen(BUSY)
    try:
        clock = StageClock(proc.pid, limit_s=0.5)
        while clock.over() is None:
            time.sleep(0.05)
        alive = clock.usage()
    finally:
        proc.kill()
        proc.wait()
    time.sleep(0.3)
    assert alive["cpu_s"] > 0.4 and clock.usage() == alive
    assert f"CPU {alive['cpu_s']:.1f} s" in clock.describe("trials", "cpu")
