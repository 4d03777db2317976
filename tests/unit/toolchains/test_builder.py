"""The builder's own checks before it builds (the builds themselves: test_loader, test_fastbuild, test_job)."""

from __future__ import annotations

from pathlib import Path

import pytest

from musaenv.toolchains import builder


def test_a_usable_build_directory_passes(tmp_path: Path) -> None:
    assert builder._unusable(tmp_path) is None
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


def test_an_unusable_build_directory_is_the_harness_fault(tmp_path: Path) -> None:
    why = builder._unusable(tmp_path / "missing")
    assert why is not None and "harness fault" in why


def _job(**over: object) -> builder.CompileJob:
    fields: dict[str, object] = {
        "version": builder.JOB_VERSION, "name": "m", "cpp_sources": ["int f();"], "cuda_sources": [],
        "functions": ["f"], "extra_cflags": [], "extra_cuda_cflags": [], "extra_ldflags": [],
        "extra_include_paths": [], "with_cuda": None, "backend": "cpu", "compile_only": False, "build_mode": "fast",
        "pch_cache": "", "timeout_s": 60.0, "parent_pid": 1, "confine": True,
    }  # fmt: skip
    return builder.CompileJob(**{**fields, **over})  # type: ignore[arg-type]


def _taking(job: builder.CompileJob) -> list[str]:
    return [t.name for t in builder.TOOLCHAINS if t.runner(job) is not None]


def test_every_job_meets_its_toolchains_in_one_ordered_list() -> None:
    """Which build paths a job may take, in the order the builder tries them (the first that does not decline
    builds it; the report's ``declined`` names those before it)."""
    assert _taking(_job()) == ["fast", "torch"]
    assert _taking(_job(backend="cuda", cuda_sources=["__global__ void k() {}"])) == ["cuda_split", "torch"]
    assert _taking(_job(backend="musa", cuda_sources=["__global__ void k() {}"]))[:1] == ["device"]
    assert _taking(_job(build_mode="clang")) == ["clang", "fast", "torch"]  # asked for: clang++ first
    # compile-only: the toolchains that have a check, the CUDA split's, then torch's path's (nvcc as written)
    assert _taking(_job(backend="cuda", compile_only=True, cuda_sources=["x"])) == ["cuda_split", "torch"]
    assert _taking(_job(backend="hip", compile_only=True, cuda_sources=["x"]))[0] == "own_check"


def test_a_declining_toolchain_hands_the_job_to_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C++ fast driver declines a job without a header store; torch's load_inline then builds it (stubbed
    here: the order and the report's ``declined`` are what is tested, the builds have their own tests)."""
    seen: list[str] = []

    def torch_build(job: object, tmp: object, declined: object) -> dict[str, object]:
        seen.append("torch")
        return {"ok": True, "tier": "torch"}

    stub = builder.Toolchain("torch", lambda j: True, build=torch_build)
    monkeypatch.setattr(builder, "TOOLCHAINS", (*builder.TOOLCHAINS[:-1], stub))
    res = builder._build(_job(), tmp_path)
    assert seen == ["torch"] and res["tier"] == "torch"
    declined = res["declined"]
    assert isinstance(declined, list) and [d["tier"] for d in declined] == ["split", "pch"]
