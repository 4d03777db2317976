"""The clang++ toolchain: a real build and load when the configuration asks for it (skipped without clang++)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from musaenv import _env
from musaenv.toolchains.cpp import clang
from musaenv.toolchains.job import CompileJob
from musaenv.toolchains.loader import BuildSpec, build_extension

SRC = r"""
#include <torch/extension.h>
torch::Tensor twice_relu(torch::Tensor x) { return torch::relu(x) * 2; }
"""

_USE = """
import importlib.machinery, importlib.util, sys, torch
loader = importlib.machinery.ExtensionFileLoader(sys.argv[1], sys.argv[2])
m = importlib.util.module_from_spec(importlib.util.spec_from_file_location(sys.argv[1], sys.argv[2], loader=loader))
loader.exec_module(m)
x = torch.randn(32)
print(bool(torch.equal(m.twice_relu(x), torch.relu(x) * 2)))
"""


@pytest.mark.skipif(shutil.which("clang++") is None, reason="needs clang++ (apt-get install clang)")
def test_clang_mode_builds_with_clang_and_the_module_loads(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    spec = BuildSpec.from_load_inline({"cpp_sources": SRC, "functions": ["twice_relu"]}, "cpu")
    out = build_extension(spec, timeout_s=1800, root=tmp_path / "ext", mode="clang")
    assert out.ok, out.log[-3000:]
    assert out.extra["tier"] == "clang"
    assert b"clang version" in Path(str(out.so_path)).read_bytes()  # the compiler's own mark in .comment
    use = subprocess.run([sys.executable, "-c", _USE, out.name, str(out.so_path)], capture_output=True, text=True,
                         timeout=600, env=_env.child_env())  # fmt: skip
    assert use.returncode == 0 and use.stdout.strip() == "True", use.stderr[-2000:]


def _job(mode: str = "clang", compile_only: bool = False, **over: object) -> CompileJob:
    spec = BuildSpec.from_load_inline({"cpp_sources": SRC, **over}, "cpu", compile_only).to_dict()
    return CompileJob.of(spec, name="m", build_mode=mode, pch_cache="", timeout_s=60.0, parent_pid=1, confine=True)


def test_without_clang_the_build_is_the_machines_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no clang++ on it
    job = _job()
    assert clang.TOOLCHAIN.runner(job) is not None
    res = clang.TOOLCHAIN.build(job, tmp_path, []) if clang.TOOLCHAIN.build else None
    assert res is not None and res["infra"] is True and "install clang" in str(res["log"])


def test_clang_takes_only_cpp_jobs_it_was_asked_for() -> None:
    assert clang.TOOLCHAIN.accepts(_job())
    assert not clang.TOOLCHAIN.accepts(_job(cuda_sources="__global__ void k() {}"))
    assert not clang.TOOLCHAIN.accepts(_job(with_cuda=True))
    assert not clang.TOOLCHAIN.accepts(_job("fast"))
    assert clang.TOOLCHAIN.runner(_job(compile_only=True)) is None  # no compile-only check of its own


def test_another_compilers_mode_keys_a_module_of_its_own() -> None:
    from musaenv.toolchains.loader import BUILD_MODES, cache_name

    spec = BuildSpec.from_load_inline({"cpp_sources": SRC, "functions": ["twice_relu"]}, "cpu")
    gcc = {cache_name(spec, mode) for mode in ("fast", "pch", "torch")}
    assert gcc == {spec.name}  # one module whichever GCC path built it
    assert cache_name(spec, "clang") != spec.name  # a clang request is never answered with GCC's module
    assert cache_name(spec, "clang").isidentifier() and set(BUILD_MODES) == {"fast", "pch", "torch", "clang"}
