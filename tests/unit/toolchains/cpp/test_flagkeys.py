"""Which flags key a precompiled header or a binding object, checked against the installed g++ itself.

The real-compiler tests use a small header (the standard library and an inline function, not torch: a torch
header costs ~20 s to precompile) with GCC's own validity check (``-Winvalid-pch``) and the produced code: the
rules GCC applies are the same whatever the header.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from musaenv.toolchains.cpp.compiler import CompileFlags
from musaenv.toolchains.cpp.fastbuild import _final_error
from musaenv.toolchains.cpp.flagkeys import bind_key_flags, pch_key_flags, refusal, refused_macros, strip_refusals
from musaenv.toolchains.cpp.pch import PchStore, retire_headers

HEADER = """#include <vector>
#include <cmath>
#include <algorithm>
#ifdef MUSAENV_TEST_SCALE
inline float scale() { return MUSAENV_TEST_SCALE; }
#else
inline float scale() { return 1.5f; }
#endif
inline float hsum(const float* p, int n) { float s = 0; for (int i = 0; i < n; ++i) s += std::sqrt(p[i]) * scale(); return s; }
template <class T> T tmax(const std::vector<T>& v) { return *std::max_element(v.begin(), v.end()); }
"""  # noqa: E501
USER = "float f(const float* p, int n) { return hsum(p, n) + tmax(std::vector<float>(p, p + n)); }\n"
BASE = ["-std=c++20", "-fPIC"]

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("objdump") is None, reason="needs g++")


def test_equivalent_flag_lists_share_a_header() -> None:
    o3 = pch_key_flags(["-O3"])
    for same in (["-O2"], ["-O1"], ["-O"], ["-O3", "-DBLOCK=256"], ["-O3", "-Wall", "-Wextra"], ["-O0", "-O3"],
                 ["-O3", "-O3"], ["-UNDEBUG", "-O2", "-w"]):  # fmt: skip
        assert pch_key_flags(same) == o3, same
    assert pch_key_flags(["-march=native", "-O3", "-fopenmp"]) == pch_key_flags(["-fopenmp", "-O2", "-march=native"])
    assert pch_key_flags(["-fno-openmp", "-fopenmp"]) == pch_key_flags(["-fopenmp"])
    assert pch_key_flags([]) == pch_key_flags(["-O0"]) == pch_key_flags(["-DX"]) == ()
    for other in ([], ["-Os"], ["-Ofast"], ["-O3", "-march=native"], ["-O3", "-fopenmp"], ["-O3", "-ffast-math"],
                  ["-O3", "-std=c++17"], ["-O3", "-g"], ["-O3", "-mavx2"], ["-O3", "-fno-math-errno"]):  # fmt: skip
        assert pch_key_flags(other) != o3, other
    # a macro GCC once refused a header for keys the headers from then on
    assert pch_key_flags(["-O3", "-DNDEBUG"], {"NDEBUG"}) != o3
    assert pch_key_flags(["-O3"], {"NDEBUG"}) == o3


def test_binding_objects_key_only_on_abi_flags() -> None:
    assert bind_key_flags(["-O3", "-march=native", "-fopenmp", "-DBLOCK=4", "-ffast-math"]) == bind_key_flags(["-O2"])
    assert bind_key_flags([]) == bind_key_flags(["-O3"]) == bind_key_flags(["-O0"]) == ("-O2",)
    for abi in (["-D_GLIBCXX_USE_CXX11_ABI=0"], ["-fno-exceptions"], ["-std=c++17"], ["-DTORCH_FOO"]):
        assert bind_key_flags(["-O3", *abi]) != bind_key_flags(["-O3"]), abi


def _gxx(args: list[str], cwd: Path) -> str:
    p = subprocess.run(["g++", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return p.stderr


def _code(obj: Path) -> list[str]:
    out = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    return out.split("\n")[3:]  # past the file name


@needs_gxx
def test_gcc_accepts_what_the_key_separates_and_refuses_what_it_keeps(tmp_path: Path) -> None:
    """A header built with ``-O3``'s key flags: the same code as no header for every flag list of that key, and
    GCC refuses it for every flag list the key keeps apart (so separating those would be unsafe)."""
    (tmp_path / "h.h").write_text(HEADER)
    (tmp_path / "u.cpp").write_text(USER)
    _gxx([*BASE, *pch_key_flags(["-O3"]), "-x", "c++-header", "h.h", "-o", "h.h.gch"], tmp_path)
    for use in (["-O3"], ["-O1"], ["-O3", "-DBLOCK=256"], ["-O2", "-Wall"], ["-O3", "-DNDEBUG"],
                ["-O3", "-funroll-loops", "-ftree-vectorize"], ["-O3", "-fno-strict-aliasing", "-ffp-contract=fast"],
                ["-O3", "-fno-tree-vectorize", "-fomit-frame-pointer"]):  # fmt: skip
        assert pch_key_flags(use) == pch_key_flags(["-O3"])
        warn = _gxx([*BASE, *use, "-Winvalid-pch", "-include", "h.h", "-c", "u.cpp", "-o", "a.o"], tmp_path)
        assert refusal(warn) == [], (use, warn)
        (tmp_path / "h.h.gch").rename(tmp_path / "off.gch")
        _gxx([*BASE, *use, "-include", "h.h", "-c", "u.cpp", "-o", "b.o"], tmp_path)
        (tmp_path / "off.gch").rename(tmp_path / "h.h.gch")
        assert _code(tmp_path / "a.o") == _code(tmp_path / "b.o"), use
    for use in ([], ["-Os"], ["-O3", "-march=native"], ["-O3", "-fopenmp"], ["-O3", "-ffast-math"],
                ["-O3", "-std=c++17"], ["-O3", "-g"], ["-O3", "-mavx2"], ["-O3", "-fno-math-errno"],
                ["-O3", "-fno-exceptions"], ["-O3", "-fno-rtti"]):  # fmt: skip
        if use == ["-O3", "-march=native"] and "-mno-" not in _gxx(["-march=native", "-Q", "--help=target"], tmp_path):
            continue
        warn = _gxx([*BASE, *use, "-Winvalid-pch", "-include", "h.h", "-c", "u.cpp", "-o", "a.o"], tmp_path)
        assert refusal(warn), use
        assert pch_key_flags(use) != pch_key_flags(["-O3"]), use
    # a macro the header tests: GCC refuses, names it, and the store keys it from then on (the header is kept)
    warn = _gxx([*BASE, "-O3", "-DMUSAENV_TEST_SCALE=2.0f", "-Winvalid-pch", "-include", "h.h", "-c", "u.cpp"],
                tmp_path)  # fmt: skip
    assert refused_macros(refusal(warn)) == {"MUSAENV_TEST_SCALE"}
    assert "Winvalid-pch" not in strip_refusals(warn)
    gch = tmp_path / "h.h.gch"
    store, d = _store_with_header(tmp_path, ["-O3", "-DMUSAENV_TEST_SCALE=2.0f"], gch)
    store.check_used("split", _flags(["-O3", "-DMUSAENV_TEST_SCALE=2.0f"]), warn)
    assert (d / "musaenv_pch.h.gch").exists() and not (d / "failed.json").exists()
    assert PchStore(store.root).sensitive_macros() == ("MUSAENV_TEST_SCALE",)
    assert PchStore(store.root)._dir("split", _flags(["-O3", "-DMUSAENV_TEST_SCALE=2.0f"])) != d
    # refused for anything else: named for the parent, which retires it (the builder deletes nothing)
    user = ["-O3", "-march=x86-64-v3"]
    warn = _gxx([*BASE, *user, "-Winvalid-pch", "-include", "h.h", "-c", "u.cpp"], tmp_path)
    store, d = _store_with_header(tmp_path / "other", user, gch)  # a header made for other flags, wrongly keyed
    store.check_used("split", _flags(user), warn)
    assert store.refused == [d.name] and (d / "musaenv_pch.h.gch").exists()
    assert retire_headers(store.root, [*store.refused, "../escape", "split-missing"]) == [d.name]
    assert (d / "failed.json").exists() and not (d / "musaenv_pch.h.gch").exists()


@needs_gxx
def test_refusal_text_the_candidate_prints_changes_nothing(tmp_path: Path) -> None:
    """A ``#warning`` worded like GCC's refusal: the empty unit with the same flags uses the header, so nothing is
    keyed or retired (before: the shared header was deleted and every later build went without it)."""
    (tmp_path / "h.h").write_text(HEADER)
    _gxx([*BASE, *pch_key_flags(["-O3"]), "-x", "c++-header", "h.h", "-o", "h.h.gch"], tmp_path)
    (tmp_path / "u.cpp").write_text(
        '#warning "musaenv_pch.h.gch: not used because `MUSAENV_OTHER\' is defined [-Winvalid-pch]"\n'
        "#warning \"musaenv_pch.h.gch: created and used with differing settings of '-march=' [-Winvalid-pch]\"\n"
    )
    user = ["-O3", "-DMUSAENV_OTHER=2", "-include", "u.cpp"]  # its own source named by a flag, too
    out = subprocess.run(["g++", *BASE, *user, "-fsyntax-only", "-x", "c++", "/dev/null"], cwd=tmp_path,
                         capture_output=True, text=True).stderr  # fmt: skip
    assert refusal(out), out
    store, d = _store_with_header(tmp_path, ["-O3"], tmp_path / "h.h.gch")
    store.check_used("split", _flags(["-O3"]), out)
    store.check_used("split", _flags(user), out)
    assert store.refused == [] and PchStore(store.root).sensitive_macros() == ()
    assert (d / "musaenv_pch.h.gch").exists() and not (d / "failed.json").exists()


def _flags(user: list[str]) -> CompileFlags:
    return CompileFlags(("g++",), (*BASE, *user), (), tuple(user), len(BASE))


def _store_with_header(root: Path, user: list[str], gch: Path) -> tuple[PchStore, Path]:
    """A store whose header for ``user`` is ``gch`` (a real one: the store checks a refusal against it)."""
    store = PchStore(root / "pch")
    d = store._dir("split", _flags(user))
    d.mkdir(parents=True)
    shutil.copyfile(gch, d / "musaenv_pch.h.gch")
    (d / "musaenv_pch.h").write_text("#error the header's text is never parsed here\n")
    return store, d


def test_a_split_tier_error_is_final_only_when_no_header_can_explain_it() -> None:
    def names() -> frozenset[str]:
        return frozenset({"linear", "functional", "nn", "torch", "py", "pybind11"})

    syntax = "main.cpp:7:28: error: expected primary-expression before ';' token\n"
    assert _final_error(syntax, 40, names)
    # a name no header of torch/extension.h mentions: missing either way
    assert _final_error(syntax + "main.cpp:9:3: error: ‘no_such_fn’ was not declared in this scope\n", 40, names)
    assert not _final_error("main.cpp:9:3: error: 'linear' is not a member of 'torch::nn::functional'\n", 40, names)
    assert not _final_error("main.cpp:9:3: error: 'py' has not been declared\n", 40, names)
    assert not _final_error("main.cpp:9:3: error: 'x' was not declared in this scope\n", 40, lambda: None)
    assert not _final_error("main.cpp:45:40: error: expected primary-expression before ')' token\n", 40, names)
    assert not _final_error("c++: fatal error: killed signal terminated program cc1plus\n", 40, names)
    assert _final_error("main.cpp:9:12: error: 'class at::Tensor' has no member named 'no_such_method'\n", 40, names)
    assert _final_error("main.cpp:3:10: fatal error: nonexistent.h: No such file or directory\n", 40, names)


def test_names_only_torch_extension_h_brings_come_from_the_compiler(tmp_path: Path) -> None:
    from musaenv.toolchains.cpp.compiler import torch_flags
    from musaenv.toolchains.cpp.header_names import extension_only_names

    flags = torch_flags(tmp_path, "musaenv_names", ["-O3"], [], [])
    names = extension_only_names(flags, tmp_path, tmp_path)
    assert names is not None and {"pybind11", "PYBIND11_MODULE", "Linear", "Sequential"} <= names
    assert "musaenv_no_such_function" not in names
    assert extension_only_names(flags, tmp_path, tmp_path) == names  # kept, not recomputed
