"""The CUDA compile-only check counts each step's CPU seconds, with a wall-clock backstop that is the host's fault.

Fake compilers (a busy loop, a sleep) stand in for nvcc and c++: the limits are what is tested, not the compilers.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from musaenv.isolation import limits
from musaenv.toolchains.cuda import compile as cuda_compile
from musaenv.toolchains.cuda.compile import _Step, cuda_compile_check

SPIN = [sys.executable, "-c", "while True: pass"]


def _fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *steps: tuple[str, list[str]]) -> None:
    monkeypatch.setattr(cuda_compile._env, "cuda_home", lambda: tmp_path)
    monkeypatch.setattr(cuda_compile, "_commands", lambda *a, **k: [_Step(n, c) for n, c in steps])


def _check(**kw: Any) -> cuda_compile.CompileCheck:
    return cuda_compile_check(["int f();"], ["__global__ void k() {}"], None, **kw)


def test_a_spinning_step_is_killed_at_its_cpu_seconds_and_stops_the_other(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake(monkeypatch, tmp_path, ("cpp", SPIN), ("cuda", ["sleep", "60"]))
    t0 = time.monotonic()
    out = _check(timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    spin, sleep = out.steps
    assert not out.ok and out.inconclusive is None, out  # the candidate's: its compile used its CPU seconds
    assert spin["timed_out"] and "1 CPU seconds" in out.log, out.log
    assert not sleep["timed_out"] and "stopped: the cpp step failed first" in sleep["note"]


def test_a_step_the_host_stalls_reaches_only_the_backstop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(limits, "BACKSTOP_FACTOR", 0.0)
    monkeypatch.setattr(limits, "BACKSTOP_EXTRA_S", 1.5)
    _fake(monkeypatch, tmp_path, ("cuda", ["sleep", "60"]))  # waits: no CPU seconds, as a starved compiler
    out = _check(timeout_s=5.0)
    (step,) = out.steps
    assert not out.ok and step["timed_out"], out
    assert out.inconclusive and "host was too slow" in out.inconclusive, out  # loader: infra_error, not cached
    assert "wall-clock backstop" in out.log
