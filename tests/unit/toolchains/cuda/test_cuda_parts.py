"""A failing device compile stops the CUDA split's host side at once (:mod:`musaenv.toolchains.cuda.parts`).

Fake steps stand in for the compilers: nvcc is a script that fails after a moment, the host compile and the C++
fast path's compile are long sleeps that record their own pid and a child's (a compiler driver and its ``cc1plus``).
The judgement of nvcc's output is :func:`~musaenv.toolchains.cuda.fast.device_verdict`'s job, tested with the real
compilers in tests/unit/toolchains/cuda/test_cuda_fast.py; here a stand-in says "own" or "not own", and what is tested
is what the build does with either: the verdict or the fallback, in seconds, no process left.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from musaenv.toolchains.cpp.compiler import run_tool
from musaenv.toolchains.cpp.fastbuild import FastResult
from musaenv.toolchains.cuda import fast as cuda_fast
from musaenv.toolchains.cuda.compile import _Step
from musaenv.toolchains.loader import pch_cache_root
from musaenv.toolchains.stopping import STOPPED_RC

KERNEL = "__global__ void k() {}\nint f() { return 0; }"
SPEC = {"functions": ["f"], "cpp_sources": ["int f();"], "cuda_sources": [KERNEL], "timeout_s": 120}
OWN = 'cuda.cu(5): error: identifier "nope" is undefined\n\n1 error detected in the compilation of "cuda.cu".\n'
# A compiler driver that starts a child in its group and waits: both pids written to <name>.pids.
SLOW = "import os, subprocess, sys; c = subprocess.Popen(['sleep', '60']); open(sys.argv[1], 'w').write(f'{os.getpid()} {c.pid}'); c.wait()"  # noqa: E501


def _nvcc(fails_after_s: float, output: str, rc: int = 1) -> list[str]:
    code = f"import sys, time; time.sleep({fails_after_s}); sys.stdout.write({output!r}); sys.exit({rc})"
    return [sys.executable, "-c", code]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _pids(path: Path) -> list[int]:
    for _ in range(100):  # the fake driver writes them once it started its child
        if path.exists() and path.read_text():
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    return []


def _fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, device: list[str], own: bool, seen: dict[str, Any]) -> None:
    def step(name: str, cmd: list[str]) -> Any:
        def make(*a: Any, **k: Any) -> _Step:
            seen[name] = _Step(name, cmd)
            return seen[name]

        return make

    def main_cpp(spec: Any, name: str, tmp: Path, cache: Path, mode: str) -> FastResult:
        t = time.monotonic()
        seen["main"] = run_tool([sys.executable, "-c", SLOW, str(tmp_path / "main.pids")], tmp, 120)
        seen["main_s"] = time.monotonic() - t
        seen["after"] = run_tool(["true"], tmp)  # a later compile of the same build starts nothing
        return FastResult(False, seen["main"][1], "split")

    monkeypatch.setattr(cuda_fast._env, "cuda_home", lambda: tmp_path)
    monkeypatch.setattr(cuda_fast, "_device_step", step("device", device))
    monkeypatch.setattr(
        cuda_fast, "_host_step", step("host", [sys.executable, "-c", SLOW, str(tmp_path / "host.pids")])
    )
    monkeypatch.setattr(cuda_fast, "fast_build", main_cpp)
    monkeypatch.setattr(cuda_fast, "device_verdict", lambda output, *a: output if own else None)


def _no_process_left(tmp_path: Path) -> None:
    for name in ("host", "main"):
        pids = _pids(tmp_path / f"{name}.pids")
        assert len(pids) == 2, name
        deadline = time.monotonic() + 5
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(_alive, pids)), (name, pids)


def test_a_kernels_own_error_stops_the_host_build_and_is_the_verdict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}
    _fake(monkeypatch, tmp_path, _nvcc(1.5, OWN), True, seen)
    t0 = time.monotonic()
    res = cuda_fast.cuda_fast_build(dict(SPEC), "m", tmp_path, pch_cache_root())
    took = time.monotonic() - t0
    assert res is not None and not res.ok and took < 30, (res, took)
    assert res.log.startswith("== cuda: ") and OWN in res.log  # the message the full wait gave before
    assert seen["main"][0] == STOPPED_RC and seen["main_s"] < 30 and "the device compile ended first" in seen["main"][1]
    assert seen["after"][0] == STOPPED_RC and "not started" in seen["after"][1]
    _no_process_left(tmp_path)


def test_a_device_failure_that_is_the_splits_fault_still_falls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}
    _fake(monkeypatch, tmp_path, _nvcc(1.5, OWN), False, seen)
    declined: list[dict[str, str]] = []
    t0 = time.monotonic()
    assert cuda_fast.cuda_fast_build(dict(SPEC), "m", tmp_path, pch_cache_root(), declined=declined) is None
    assert time.monotonic() - t0 < 30
    assert "abandoned" in declined[-1]["why"] and "device" in declined[-1]["why"], declined
    assert seen["main"][0] == STOPPED_RC
    _no_process_left(tmp_path)


def test_a_killed_nvcc_is_never_judged_but_still_stops_the_host_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}
    _fake(monkeypatch, tmp_path, [sys.executable, "-c", "import os, time; time.sleep(1.5); os.kill(os.getpid(), 9)"],
          True, seen)  # fmt: skip
    assert cuda_fast.cuda_fast_build(dict(SPEC), "m", tmp_path, pch_cache_root()) is None  # the own-error judge
    assert seen["main"][0] == STOPPED_RC  # would have said yes: it was never asked
    _no_process_left(tmp_path)


def test_a_device_compile_that_succeeds_stops_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    _fake(monkeypatch, tmp_path, ["true"], True, seen)
    monkeypatch.setattr(cuda_fast, "_host_step", lambda *a, **k: _Step("host", ["true"]))

    def main_cpp(spec: Any, name: str, tmp: Path, cache: Path, mode: str) -> FastResult:
        time.sleep(1.0)  # nvcc has ended by now
        seen["main"] = run_tool([sys.executable, "-c", "print('built')"], tmp)
        return FastResult(False, seen["main"][1], "split")

    monkeypatch.setattr(cuda_fast, "fast_build", main_cpp)
    assert cuda_fast.cuda_fast_build(dict(SPEC), "m", tmp_path, pch_cache_root()) is None  # main.cpp's own "error"
    assert seen["main"] == (0, "built\n")
