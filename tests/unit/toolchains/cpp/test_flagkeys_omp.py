"""``-fopenmp``/``-pthread`` share a header when its text does not depend on them, with the code of a header of
their own; checked against the installed g++ (a small header: the rules are GCC's, whatever the header)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from musaenv.toolchains.cpp import pch
from musaenv.toolchains.cpp.compiler import CompileFlags
from musaenv.toolchains.cpp.flagkeys import OMP_SHARED_FLAGS, omp_macros, pch_key_flags, refusal
from musaenv.toolchains.cpp.pch import PchStore

HEADER = """#include <vector>
#include <cmath>
#include <numeric>
inline double norm(const std::vector<double>& v) { double s = 0; for (double x : v) s += x * x; return std::sqrt(s); }
template <class T> T total(const std::vector<T>& v) { return std::accumulate(v.begin(), v.end(), T{}); }
"""
OMP_USER = """#ifdef _OPENMP
#include <omp.h>
#endif
double f(const std::vector<double>& v, double* out, int n) {
#pragma omp parallel for
  for (int i = 0; i < n; ++i) out[i] = v[i] * 2.0 + norm(v);
#ifdef _OPENMP
  static_assert(_OPENMP == OMP_VALUE, "the unit sees the compiler's own _OPENMP");
  return total(v) + omp_get_max_threads();
#else
  return total(v);
#endif
}
"""
SIMD = "inline void twice(float* p, int n) {\n#pragma omp simd\nfor (int i = 0; i < n; ++i) p[i] *= 2;\n}\n"
BASE = ["-std=c++20", "-fPIC", "-O2"]
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("objdump") is None, reason="needs g++")


def test_openmp_and_threads_key_alike_once_shared() -> None:
    o3 = pch_key_flags(["-O3"], omp_shared=True)
    assert o3 == tuple(sorted(("-O3", *OMP_SHARED_FLAGS)))
    for same in (["-O3", "-fopenmp"], ["-O2", "-pthread"], ["-fopenmp", "-O3", "-pthread"], ["-fno-openmp", "-O3"]):
        assert pch_key_flags(same, omp_shared=True) == o3, same
    assert pch_key_flags(["-O3", "-march=native", "-fopenmp"], omp_shared=True) != o3  # a target option still keys
    # a list that defines or undefines those macros itself keys as before
    assert pch_key_flags(["-O3", "-fopenmp", "-D_OPENMP=1"], omp_shared=True) == pch_key_flags(["-O3", "-fopenmp"])
    assert pch_key_flags(["-O3", "-fopenmp"]) != pch_key_flags(["-O3"])  # not shared: keyed, as before
    assert omp_macros(["-O3", "-fopenmp"]) == ("_OPENMP", "_REENTRANT")
    assert omp_macros(["-fopenmp", "-fno-openmp", "-pthread"]) == ("_REENTRANT",)
    assert omp_macros(["-O3"]) == ()


def _gxx(args: list[str], cwd: Path) -> str:
    return subprocess.run(["g++", *args], cwd=cwd, capture_output=True, text=True, check=True).stderr


def _code(obj: Path) -> list[str]:
    out = subprocess.run(["objdump", "-d", "--no-addresses", str(obj)], capture_output=True, text=True, check=True)
    return out.stdout.split("\n")[3:]  # past the file name


def _omp_value(cwd: Path) -> str:
    out = subprocess.run(["g++", "-fopenmp", "-dM", "-E", "-x", "c++", "/dev/null"], cwd=cwd, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return next(line.split()[2] for line in out.splitlines() if line.startswith("#define _OPENMP "))


@needs_gxx
def test_a_shared_header_gives_the_code_of_a_header_of_ones_own(tmp_path: Path) -> None:
    (tmp_path / "h.h").write_text(HEADER)
    value = _omp_value(tmp_path)
    (tmp_path / "u.cpp").write_text(OMP_USER.replace("OMP_VALUE", value))
    (tmp_path / "restore.h").write_text(f"#define _OPENMP {value}\n#define _REENTRANT 1\n")

    def header(name: str, flags: list[str]) -> None:
        d = tmp_path / name
        d.mkdir()
        (d / "h.h").write_text(HEADER)
        _gxx([*BASE, *flags, "-x", "c++-header", "h.h", "-o", "h.h.gch"], d)

    header("shared", list(OMP_SHARED_FLAGS))
    header("own_omp", ["-fopenmp"])
    header("plain", [])
    use = ["-Winvalid-pch", "-c", "u.cpp"]
    # an OpenMP unit: undefines the two macros for the shared header and defines them again right after it
    warn = _gxx([*BASE, "-O3", "-fopenmp", "-U_OPENMP", "-U_REENTRANT", "-Ishared", "-include", "h.h", "-include",
                 "restore.h", *use, "-o", "shared_omp.o"], tmp_path)  # fmt: skip
    assert refusal(warn) == [], warn
    _gxx([*BASE, "-O3", "-fopenmp", "-Iown_omp", "-include", "h.h", *use, "-o", "own_omp.o"], tmp_path)
    assert _code(tmp_path / "shared_omp.o") == _code(tmp_path / "own_omp.o")
    nm = subprocess.run(["nm", "shared_omp.o"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "GOMP_parallel" in nm and "omp_get_max_threads" in nm  # the loop really runs in parallel
    # a unit without OpenMP: the shared header gives the code of the plain one
    warn = _gxx([*BASE, "-O3", "-Ishared", "-include", "h.h", *use, "-o", "shared_plain.o"], tmp_path)
    assert refusal(warn) == [], warn
    _gxx([*BASE, "-O3", "-Iplain", "-include", "h.h", *use, "-o", "plain.o"], tmp_path)
    assert _code(tmp_path / "shared_plain.o") == _code(tmp_path / "plain.o")


def _flags(user: list[str]) -> CompileFlags:
    return CompileFlags(("g++",), (*BASE, *user), (), tuple(user), len(BASE), "test-toolchain")


@needs_gxx
@pytest.mark.parametrize(
    ("text", "shared"),
    [
        (HEADER, True),
        (HEADER + "#ifdef _OPENMP\n#include <omp.h>\n#endif\n", False),  # the text depends on -fopenmp
        (HEADER + SIMD, False),  # an OpenMP pragma parses differently under -fopenmp
    ],
)
def test_the_store_shares_a_header_only_when_its_text_does_not_depend_on_openmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, shared: bool
) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "musaenv_test_h.h").write_text(text)
    monkeypatch.setitem(pch.HEADERS, "split", "musaenv_test_h.h")
    user = ["-O3", "-fopenmp"]
    flags = CompileFlags(("g++",), (*BASE, "-I", str(tmp_path / "inc"), *user), (), tuple(user), len(BASE) + 2, "t")
    store = PchStore(tmp_path / "pch")
    assert store.omp_shared("split", flags) is None
    got = store.build("split", flags)
    (found,) = (tmp_path / "pch").glob("omp-split-*.json")
    record = json.loads(found.read_text())
    assert record["shared"] is shared and store.omp_shared("split", flags) is shared
    assert got is not None
    if shared:
        assert record["macros"] == {"_OPENMP": _omp_value(tmp_path), "_REENTRANT": "1"}
        assert got[:2] == ["-U_OPENMP", "-U_REENTRANT"] and got[-1].endswith("musaenv_restore_openmp_reentrant.h")
        assert Path(got[-1]).read_text() == f"#define _OPENMP {record['macros']['_OPENMP']}\n#define _REENTRANT 1\n"
        plain = CompileFlags(("g++",), (*BASE, "-I", str(tmp_path / "inc"), "-O3"), (), ("-O3",), len(BASE) + 2, "t")
        assert store.include_flags("split", plain) == got[2:5]  # the same header, nothing to restore
    else:
        assert "-U_OPENMP" not in got
    # the decision is the installation's, read back by every later store
    assert PchStore(tmp_path / "pch").omp_shared("split", flags) is shared
    # checked per header: another optimisation class has a text of its own to check
    o0 = CompileFlags(("g++",), (*BASE, "-I", str(tmp_path / "inc"), "-O0"), (), ("-O0",), len(BASE) + 2, "t")
    assert PchStore(tmp_path / "pch").omp_shared("split", o0) is None


def test_headers_of_an_older_release_or_another_toolchain_are_not_used(tmp_path: Path) -> None:
    store = PchStore(tmp_path / "pch")
    a, b = _flags(["-O3"]), CompileFlags(*_flags(["-O3"]).__dict__.values())
    assert store._dir("split", a) == store._dir("split", b)
    other = CompileFlags(a.cxx, a.cflags, a.ldflags, a.user, a.user_at, "torch 9.9|py3.11|x86_64|g++ 12")
    assert store._dir("split", other) != store._dir("split", a)  # GCC would use a stale header silently
    assert other.bind_key() != a.bind_key()
    # an older release's header (no key.json) never counts as a set, and is removed when a header is built
    store = PchStore(tmp_path / "pch", max_sets={"split": 1})
    old = tmp_path / "pch" / "split-0123456789abcdef"
    old.mkdir(parents=True)
    (old / "musaenv_pch.h.gch").write_bytes(b"stand-in")
    assert not store._full(store._dir("split", a), "split")
    current = tmp_path / "pch" / "split-fedcba9876543210"
    current.mkdir()
    (current / "musaenv_pch.h.gch").write_bytes(b"stand-in")
    (current / "key.json").write_text(json.dumps({"format": pch.PCH_FORMAT, "toolchain": "t"}))
    assert store._full(store._dir("split", a), "split")  # one current set: the limit of 1 is reached
    store._drop_stale("split")
    assert not old.exists() and current.exists()


@needs_gxx
def test_a_compiler_other_than_gcc_keeps_openmp_in_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sharing rests on GCC's header rules; a compiler that says it is clang is not trusted with them.
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "musaenv_test_h.h").write_text(HEADER)
    monkeypatch.setitem(pch.HEADERS, "split", "musaenv_test_h.h")
    user = ["-O3", "-fopenmp"]
    flags = CompileFlags(("g++", "-D__clang__=1"), (*BASE, "-I", str(tmp_path / "inc"), *user), (), tuple(user),
                         len(BASE) + 2, "t")  # fmt: skip
    store = PchStore(tmp_path / "pch")
    got = store.build("split", flags)
    assert store.omp_shared("split", flags) is False
    assert got is not None and "-U_OPENMP" not in got


def test_a_check_that_cannot_run_decides_nothing(tmp_path: Path) -> None:
    # The compiler does not run: no record is written (the next build checks again) and the headers stay keyed.
    flags = CompileFlags(("false",), (*BASE, "-O3", "-fopenmp"), (), ("-O3", "-fopenmp"), len(BASE), "t")
    store = PchStore(tmp_path / "pch")
    assert store.build("split", flags) is None
    assert store.omp_shared("split", flags) is None
    assert not list((tmp_path / "pch").glob("omp-*.json"))
