"""Instruction-set extensions (``-mavx2 -mfma``...) share the header of the rest of the flags when its text does not
depend on them, taken by ``#pragma GCC target`` after it, with the candidate's code of a header of their own;
checked against the installed g++ (a small header: the rules are GCC's, whatever the header)."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from musaenv.toolchains import own_checks
from musaenv.toolchains.cpp import pch
from musaenv.toolchains.cpp.compiler import CompileFlags
from musaenv.toolchains.cpp.fastbuild import _ISA_ARTEFACT, isa_pragma_safe
from musaenv.toolchains.cpp.flagkeys import isa_families, isa_flags, isa_pragma, pch_key_flags, refusal
from musaenv.toolchains.cpp.pch import PchStore

HEADER = """#include <vector>
#include <cmath>
#include <algorithm>
#include <immintrin.h>
inline float clampf(float x) { return std::min(std::max(x, 0.0f), 6.0f); }
template <class T> T total(const std::vector<T>& v) { T s{}; for (const T& x : v) s += x; return s; }
"""
USER = """#ifndef __AVX2__
#error the unit does not see __AVX2__
#endif
#ifndef __FMA__
#error the unit does not see __FMA__
#endif
static_assert(__BIGGEST_ALIGNMENT__ == 32, "the alignment -mavx2 gives");
#ifndef FP_FAST_FMA
#error the unit does not see what <math.h> defines under -mfma
#endif
void axpy(const float* x, const float* y, float* out, float a, long n) {
  long i = 0;
  __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) out[i] = clampf(a * x[i] + y[i]);
}
float sum(const std::vector<float>& v) { float s = 0; for (float x : v) s += x * x + 1.0f; return s + total(v); }
"""
BASE = ["-std=c++20", "-fPIC"]
USER_FLAGS = ["-O3", "-mavx2", "-mfma"]
needs_gxx = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("objdump") is None or platform.machine() not in ("x86_64", "AMD64"),
    reason="needs g++ on x86-64",
)


def test_extensions_key_apart_until_shared_and_leave_the_unit_s_command_line_then() -> None:
    assert isa_flags(["-O3", "-mavx2", "-mfma", "-march=native", "-mprefer-vector-width=256"]) == ("-mavx2", "-mfma")
    assert isa_flags(["-mavx2", "-mno-avx2", "-O3"]) == ()  # turned off again: nothing to take by pragma
    assert isa_flags(["-O3", "-mno-avx2", "-mavx2"]) == ("-mavx2",)
    # only where the unit's optimisation options are its header's (GCC takes them from the header after the pragma)
    assert isa_flags(["-O2", "-mavx2"]) == isa_flags(["-O3", "-funroll-loops", "-mavx2"]) == ()
    assert isa_flags(["-Os", "-mavx2"]) == isa_flags(["-mavx2"]) == ("-mavx2",)  # classes of their own
    assert isa_families(["-mno-avx2", "-mavx2", "-mfma", "-O3", "-DX=1"]) == {"-mno-avx2", "-mavx2", "-mfma"}
    assert isa_pragma(("-mavx2", "-mfma", "-msse4.2")) == '#pragma GCC target("avx2,fma,sse4.2")'
    o3 = pch_key_flags(["-O3"])
    assert pch_key_flags(USER_FLAGS) != o3  # not shared: keyed, as GCC requires
    assert pch_key_flags(USER_FLAGS, isa_shared=True) == o3
    native = pch_key_flags(["-O3", "-march=native"])
    assert pch_key_flags(["-O3", "-mavx512f", "-march=native"], isa_shared=True) == native
    assert pch_key_flags(["-O3", "-mno-avx2"], isa_shared=True) != o3  # a negative option is not an extension


def _gxx(args: list[str], cwd: Path) -> str:
    return subprocess.run(["g++", *args], cwd=cwd, capture_output=True, text=True, check=True).stderr


def _functions(obj: Path, names: tuple[str, ...] = ("axpy", "sum")) -> dict[str, list[str]]:
    """Disassembly of the unit's own functions (the header's out-of-line copies keep the header's target)."""
    out = subprocess.run(["objdump", "-d", "--no-addresses", "-C", str(obj)], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    found: dict[str, list[str]] = {}
    for block in out.split("\n\n"):
        head = block.strip().splitlines()[0] if block.strip() else ""
        for name in names:
            if head.startswith("<" + name + "(") or f" <{name}(" in head:
                found[name] = block.strip().splitlines()[1:]
    return found


def _header_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    """An include directory holding ``text`` as the split tier's header (in place of ``torch/types.h``)."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "musaenv_test_isa.h").write_text(text)
    monkeypatch.setitem(pch.HEADERS, "split", "musaenv_test_isa.h")
    return inc


def _store_flags(inc: Path, user: list[str]) -> CompileFlags:
    return CompileFlags(("g++",), (*BASE, "-I", str(inc), *user), (), tuple(user), len(BASE) + 2, "t")


@needs_gxx
def test_a_shared_header_with_the_pragma_gives_the_code_of_the_real_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inc = _header_dir(tmp_path, monkeypatch, HEADER)
    (tmp_path / "u.cpp").write_text(USER)
    store = PchStore(tmp_path / "pch")
    plain = _store_flags(inc, ["-O3"])
    assert store.build("split", plain) is not None  # the header of the rest of the flags
    assert len(list((tmp_path / "pch").glob("text-split-*.json"))) == 1  # its text's digest, kept for the check
    assert len(list((tmp_path / "pch").glob("macros-split-*.json"))) == 1  # and its macros
    flags = _store_flags(inc, USER_FLAGS)
    assert store.isa_shared("split", flags) is None
    use = store.include_flags("split", flags)  # checked here: the rest of the flags has its header ready
    assert store.isa_shared("split", flags) is True and use is not None
    assert use[:3] == store.include_flags("split", plain)  # the same header, then the pragma
    pragma = Path(use[-1]).read_text()
    assert pragma.startswith('#pragma GCC target("avx2,fma")\n') and "#define __AVX2__ 1" in pragma
    assert "#define __BIGGEST_ALIGNMENT__ 32" in pragma  # what -mavx2 changes, not only what it adds
    assert "#define FP_FAST_FMA 1" in pragma  # a macro the header itself (glibc's <math.h>) defines under -mfma
    unit = store.unit_flags("split", flags)
    assert "-mavx2" not in unit.cflags and "-mfma" not in unit.cflags and "-O3" in unit.cflags
    warn = _gxx([*unit.cflags, "-Winvalid-pch", *use, "-c", "u.cpp", "-o", "shared.o"], tmp_path)
    assert refusal(warn) == [], warn
    assert not warn.strip(), warn  # no redefinition warnings in the candidate's log
    # the real flags, no header at all: the candidate's functions are the same instructions
    _gxx([*BASE, *USER_FLAGS, "-include", str(inc / "musaenv_test_isa.h"), "-c", "u.cpp", "-o", "real.o"], tmp_path)
    shared, real = _functions(tmp_path / "shared.o"), _functions(tmp_path / "real.o")
    assert set(shared) == {"axpy", "sum"} and shared == real
    assert any("vfmadd" in line for line in shared["axpy"])
    # the decision is the installation's, read back by every later store
    assert PchStore(tmp_path / "pch").isa_shared("split", flags) is True
    (found,) = (tmp_path / "pch").glob("isa-split-*.json")
    assert json.loads(found.read_text())["shared"] is True


@needs_gxx
def test_each_later_set_of_extensions_preprocesses_only_with_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base flags' text and macros are read from the store: a new set of extensions costs two preprocessings
    (its text and its macros), run side by side."""
    inc = _header_dir(tmp_path, monkeypatch, HEADER)
    store = PchStore(tmp_path / "pch")
    assert store.check_isa("split", _store_flags(inc, USER_FLAGS)) is True
    ran: list[tuple[str, ...]] = []
    real_run = subprocess.run

    def counting_run(cmd, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(tuple(cmd))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(pch.subprocess, "run", counting_run)
    assert PchStore(tmp_path / "pch").check_isa("split", _store_flags(inc, ["-O3", "-msse4.2"])) is True
    assert len(ran) == 2 and all("-msse4.2" in cmd for cmd in ran), ran
    assert sorted("-dM" in cmd for cmd in ran) == [False, True]


@needs_gxx
def test_a_header_whose_text_depends_on_an_extension_keeps_it_in_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inc = _header_dir(tmp_path, monkeypatch, HEADER + "#ifdef __AVX2__\ninline int wide() { return 8; }\n#endif\n")
    store = PchStore(tmp_path / "pch")
    flags = _store_flags(inc, USER_FLAGS)
    assert store.check_isa("split", flags) is False
    assert store.unit_flags("split", flags) == flags
    assert store._dir("split", flags) != store._dir("split", _store_flags(inc, ["-O3"]))
    got = store.build("split", flags)  # a header of its own, built with the extensions
    assert got is not None and not any("isa-" in g for g in got)


@needs_gxx
def test_a_refusal_under_the_pragma_keys_the_extensions_again_and_keeps_the_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inc = _header_dir(tmp_path, monkeypatch, HEADER)
    store = PchStore(tmp_path / "pch")
    assert store.build("split", _store_flags(inc, ["-O3"])) is not None
    flags = _store_flags(inc, USER_FLAGS)
    assert store.include_flags("split", flags) is not None and store.isa_shared("split", flags)
    d = store._dir("split", flags)
    line = f"{d}/musaenv_pch.h.gch: created and used with different settings of -mavx2\n"
    store.check_used("split", flags, line)  # only the candidate's text: an empty unit uses the header
    assert store.isa_shared("split", flags) and PchStore(tmp_path / "pch").isa_shared("split", flags)
    # a compiler that refuses it for the empty unit too (GCC here does not: stood in for at that one point)
    monkeypatch.setattr(own_checks, "refusal_of_empty_unit", lambda *a: line)
    store.check_used("split", flags, line)
    assert (d / "musaenv_pch.h.gch").exists() and not (d / "failed.json").exists()
    assert PchStore(tmp_path / "pch").isa_shared("split", flags) is False


@needs_gxx
def test_a_compiler_other_than_gcc_keeps_the_extensions_in_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inc = _header_dir(tmp_path, monkeypatch, HEADER)
    flags = CompileFlags(("g++", "-D__clang__=1"), (*BASE, "-I", str(inc), *USER_FLAGS), (), tuple(USER_FLAGS),
                         len(BASE) + 2, "t")  # fmt: skip
    assert PchStore(tmp_path / "pch").check_isa("split", flags) is False


def test_a_check_that_cannot_run_decides_nothing(tmp_path: Path) -> None:
    flags = CompileFlags(("false",), (*BASE, *USER_FLAGS), (), tuple(USER_FLAGS), len(BASE), "t")
    store = PchStore(tmp_path / "pch")
    assert store.check_isa("split", flags) is None
    assert store.isa_shared("split", flags) is None
    assert not list((tmp_path / "pch").glob("isa-*.json"))


def test_sources_the_pragma_could_change_keep_their_extensions_on_the_command_line() -> None:
    assert isa_pragma_safe('void f() {}\n#pragma GCC target("avx512f")\nvoid g() {}\n')  # its own target: fine
    for unsafe in ('#pragma GCC reset_options\n', '__attribute__((target_clones("avx2", "default"))) void f();',
                   '__attribute__((target ( "default" ))) int f() { return 0; }'):  # fmt: skip
        assert not isa_pragma_safe(unsafe), unsafe
    store = PchStore(Path("/nonexistent"), isa_by_pragma=False)
    assert store.isa_shared("split", _store_flags(Path("/nonexistent"), USER_FLAGS)) is False


@needs_gxx
def test_gcc_s_own_initialiser_keeps_the_header_s_target(tmp_path: Path) -> None:
    # Why the fast build retries such a failure with the real flags: a namespace-scope AVX initialiser runs in a
    # function GCC makes at the end of the unit, with the target of the command line, not the pragma's.
    (tmp_path / "h.h").write_text(HEADER)
    _gxx([*BASE, "-O3", "-x", "c++-header", "h.h", "-o", "h.h.gch"], tmp_path)
    (tmp_path / "isa.h").write_text(isa_pragma(("-mavx2", "-mfma")) + "\n#define __AVX2__ 1\n#define __FMA__ 1\n")
    unit = "static const __m256 ones = _mm256_set1_ps(1.0f);\n"
    unit += "float first() { float o[8]; _mm256_storeu_ps(o, ones); return o[0]; }\n"
    (tmp_path / "g.cpp").write_text(unit)
    cmd = ["g++", *BASE, "-O3", "-Winvalid-pch", "-include", "h.h", "-include", "isa.h", "-c", "g.cpp"]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode != 0 and _ISA_ARTEFACT.search(p.stderr), p.stderr[-800:]
    _gxx([*BASE, *USER_FLAGS, "-include", "h.h", "-c", "g.cpp", "-o", "real.o"], tmp_path)  # the real flags build
