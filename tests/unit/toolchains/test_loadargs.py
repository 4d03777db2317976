"""The one table of ``load_inline``'s arguments, as the run-time and the static readers use it."""

from __future__ import annotations

import ast
import inspect

import pytest

from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.loadargs import (
    LIST_KWARGS,
    LOAD_INLINE_ARGS,
    canonical,
    flag_keywords,
    normalise_list,
    source_kind,
)
from musaenv.verification.static_names import build_symbols
from musaenv.verification.static_sources import find_builds


def test_table_is_torchs_positional_order() -> None:
    ce = pytest.importorskip("torch.utils.cpp_extension")
    params = list(inspect.signature(ce.load_inline).parameters)
    assert [a.name for a in LOAD_INLINE_ARGS] == params[: len(LOAD_INLINE_ARGS)]


def test_backend_spelling_is_renamed_and_wins() -> None:
    assert canonical({"musa_sources": ["a"], "cuda_sources": ["b"], "extra_musa_cflags": "-O3"}) == {
        "cuda_sources": ["a"],
        "extra_cuda_cflags": "-O3",
    }
    assert source_kind("musa_sources") == "musa"
    assert source_kind("cuda_sources") == "cuda"
    assert source_kind("extra_cflags") is None
    assert "extra_musa_cflags" in flag_keywords()


def test_list_arguments_read_alike() -> None:
    assert normalise_list("extra_cflags", " -O3  -DX=1 ") == ("-O3", "-DX=1")
    assert normalise_list("extra_include_paths", [" /a ", " "]) == ("/a",)
    assert normalise_list("cpp_sources", None) == ()
    with pytest.raises(TypeError, match="extra_ldflags"):
        normalise_list("extra_ldflags", 3)
    assert "sycl_sources" not in LIST_KWARGS


def test_static_and_runtime_readers_agree_on_a_musa_call() -> None:
    code = (
        "from torch_musa.utils.musa_extension import load_inline\n"
        "m = load_inline('m', 'int f();', musa_sources='__global__ void k(){}', extra_musa_cflags=['-O2'],"
        " functions='f')\n"
    )
    (build,) = find_builds(code, build_symbols(ast.parse(code)))
    static = {s.kind: s.text for s in build.sources}
    spec = BuildSpec.from_load_inline(
        canonical(
            {
                "cpp_sources": "int f();",
                "musa_sources": "__global__ void k(){}",
                "extra_musa_cflags": ["-O2"],
                "functions": "f",
            }
        ),
        backend="musa",
    )
    assert static == {"cpp": spec.cpp_sources[0], "musa": spec.cuda_sources[0]}
    assert build.flags_by_keyword == {"extra_musa_cflags": list(spec.extra_cuda_cflags)}
    assert build.functions == list(spec.functions or ())
