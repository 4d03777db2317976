"""Why a faster build path did not apply is captured where each path declines (musaenv.toolchains.cpp.fastbuild,
cuda.fast, builder) and sealed with the artifact, so a cache hit reports the path it was built with."""

from __future__ import annotations

import time
from pathlib import Path

from musaenv.isolation.integrity import file_sha256
from musaenv.toolchains import builder, ext_cache
from musaenv.toolchains.cpp.fastbuild import _split_unfit, fast_build
from musaenv.toolchains.cuda.fast import split_unfit
from musaenv.toolchains.loader import _cache_lookup

_NAME = "musaenv_0123456789abcdef"
_SPEC = {"name": _NAME, "cpp_sources": ["torch::Tensor f(torch::Tensor x) { return x; }"], "functions": ["f"],
         "cuda_sources": [], "extra_cflags": [], "extra_cuda_cflags": [], "extra_ldflags": [],
         "extra_include_paths": [], "with_cuda": None, "backend": "cpu", "build_mode": "fast"}  # fmt: skip


def test_the_split_tier_says_which_part_of_the_source_it_cannot_take() -> None:
    plain = "torch::Tensor f(torch::Tensor x) { return x; }"
    assert _split_unfit(plain, [("f", "f")]) == ""
    assert "Python or pybind11 ('py::')" in _split_unfit(plain + "\nvoid g(py::object o) {}", [("f", "f")])
    assert "no functions=" in _split_unfit(plain, [])
    assert "plain C++ name" in _split_unfit(plain, [("operator()", "f")])
    assert "docstring" in _split_unfit(plain, [("f", 'says "hi"')])


def test_the_fast_driver_names_both_its_tiers_when_it_cannot_take_a_spec(tmp_path: Path) -> None:
    declined: list[dict[str, str]] = []
    cuda = {**_SPEC, "cuda_sources": ["__global__ void k() {}"]}
    assert fast_build(cuda, _NAME, tmp_path, tmp_path / "pch", "fast", declined) is None
    assert [d["tier"] for d in declined] == ["split", "pch"]
    assert all(d["why"] == "cuda sources: the fast driver compiles C++ only" for d in declined)
    only_pch: list[dict[str, str]] = []
    assert fast_build({**_SPEC, "with_cuda": True}, _NAME, tmp_path, tmp_path / "pch", "pch", only_pch) is None
    assert only_pch == [{"tier": "pch", "why": "with_cuda=True: the fast driver links no CUDA libraries"}]


def test_the_builder_records_a_build_mode_or_backend_that_rules_a_tier_out(tmp_path: Path) -> None:
    declined: list[dict[str, str]] = []
    assert builder._fast({**_SPEC, "build_mode": "torch", "pch_cache": str(tmp_path)}, tmp_path, declined) is None
    assert declined == [{"tier": "split", "why": "build mode torch (configure_builds)"},
                        {"tier": "pch", "why": "build mode torch (configure_builds)"}]  # fmt: skip
    cuda: list[dict[str, str]] = []
    musa = {**_SPEC, "backend": "musa", "pch_cache": str(tmp_path), "cuda_sources": ["__global__ void k() {}"]}
    assert builder._cuda_split(musa, tmp_path, False, cuda) is None
    assert cuda == [{"tier": "cuda_split", "why": "the MUSA backend builds with mcc"}]


def test_the_cuda_split_names_what_keeps_a_source_from_it() -> None:
    cuda = {**_SPEC, "cuda_sources": ["__global__ void k() {}"]}
    assert "no CUDA toolkit" in str(split_unfit(cuda, toolkit=False, splittable=True))
    assert "relocatable device code" in str(split_unfit({**cuda, "extra_cuda_cflags": ["-rdc=true"]}, True, True))
    assert "could not be split" in str(split_unfit(cuda, True, splittable=False))
    assert split_unfit(cuda, True, True) is None


def test_a_cache_hit_reports_the_tier_sealed_with_the_module(tmp_path: Path) -> None:
    root, work = tmp_path / "ext", tmp_path / "work"
    work.mkdir()
    (work / f"{_NAME}.so").write_bytes(b"\x7fELF not really")
    how = {"tier": "pch", "declined": [{"tier": "split", "why": "the source uses Python or pybind11"}]}
    ext_cache.install(work, _NAME, root / _NAME, how)
    hit = _cache_lookup(root, _NAME, time.perf_counter())
    assert hit is not None and hit.ok and hit.cached
    assert (hit.extra["tier"], hit.extra["declined"]) == ("pch", how["declined"])
    shipped = ext_cache.export_artifact(_NAME, root)  # another node's cache keeps it too
    assert shipped is not None and ext_cache.import_artifact(shipped, tmp_path / "other")
    assert ext_cache.built_with(tmp_path / "other", _NAME) == how


def test_an_unsealed_tier_is_never_reported(tmp_path: Path) -> None:
    root, work = tmp_path / "ext", tmp_path / "work"
    work.mkdir()
    so = work / f"{_NAME}.so"
    so.write_bytes(b"\x7fELF not really")
    (root / _NAME).mkdir(parents=True)  # a manifest anyone could write: not sealed by this parent
    forged = f'{{"name": "{_NAME}", "sha256": "{file_sha256(so)}", "tier": "split", "declined": []}}'
    (root / _NAME / "manifest.json").write_text(forged)
    assert ext_cache.built_with(root, _NAME) == {"tier": None, "declined": []}
    ext_cache.install(work, _NAME, root / _NAME)  # an install that knows no tier (a module shipped by an old node)
    assert ext_cache.built_with(root, _NAME) == {"tier": None, "declined": []}


def test_a_sealed_compile_error_reports_the_tier_that_judged_it(tmp_path: Path) -> None:
    root = tmp_path / "ext"
    ext_cache.seal_failure(root / _NAME, _NAME, "error: x", {"tier": "split", "declined": []})
    hit = _cache_lookup(root, _NAME, time.perf_counter())
    assert hit is not None and not hit.ok and hit.cached and hit.extra["tier"] == "split"
