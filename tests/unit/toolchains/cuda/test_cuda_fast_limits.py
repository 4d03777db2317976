"""The CUDA split build counts each step's CPU seconds, with a wall-clock backstop (not a wall-clock deadline).

Fake compile steps (a busy loop, a sleep) stand in for nvcc and the host compile, and the C++ fast path is reduced
to its link call (which waits for both steps): the limits are what is tested, not the compilers
(tests/unit/toolchains/cuda/test_cuda_fast.py builds with the real ones). Either way past a limit the split is abandoned
(``None``: the source is built as written, whose output is the verdict).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from musaenv.isolation import limits
from musaenv.toolchains.cpp import fastbuild
from musaenv.toolchains.cuda import fast as cuda_fast
from musaenv.toolchains.cuda.compile import _Step
from musaenv.toolchains.loader import pch_cache_root

SPIN = [sys.executable, "-c", "while True: pass"]
KERNEL = "__global__ void k() {}\nint f() { return 0; }"
SPEC = {"functions": ["f"], "cpp_sources": ["int f();"], "cuda_sources": [KERNEL]}


def _fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, device: list[str], seen: list[_Step]) -> None:
    def step(name: str, cmd: list[str]) -> Any:
        def make(*a: Any, **k: Any) -> _Step:
            seen.append(_Step(name, cmd))
            return seen[-1]

        return make

    def link_only(spec: Any, name: str, tmp: Path, cache: Path, mode: str) -> Any:
        linker = fastbuild._LINKER.get()
        assert linker is not None
        return linker([], tmp / f"{name}.so")

    monkeypatch.setattr(cuda_fast._env, "cuda_home", lambda: tmp_path)
    monkeypatch.setattr(cuda_fast, "_device_step", step("device", device))
    monkeypatch.setattr(cuda_fast, "_host_step", step("host", ["true"]))
    monkeypatch.setattr(cuda_fast, "fast_build", link_only)


def test_a_spinning_step_ends_at_its_cpu_seconds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[_Step] = []
    _fake(monkeypatch, tmp_path, SPIN, seen)
    t0 = time.monotonic()
    assert cuda_fast.cuda_fast_build({**SPEC, "timeout_s": 1.0}, "m", tmp_path, pch_cache_root()) is None
    assert time.monotonic() - t0 < 15
    device = seen[0]
    assert device.cpu_limit_s == 1.0 and device.timed_out and not device.host_stalled


def test_a_step_the_host_stalls_reaches_only_the_backstop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(limits, "BACKSTOP_FACTOR", 0.0)
    monkeypatch.setattr(limits, "BACKSTOP_EXTRA_S", 2.0)
    seen: list[_Step] = []
    _fake(monkeypatch, tmp_path, ["sleep", "60"], seen)  # waits, using no CPU: a starved compiler
    t0 = time.monotonic()
    assert cuda_fast.cuda_fast_build({**SPEC, "timeout_s": 1.0}, "m", tmp_path, pch_cache_root()) is None
    took = time.monotonic() - t0
    device = seen[0]
    assert device.timed_out and device.host_stalled and 1.5 < took < 15, (took, device.record())
