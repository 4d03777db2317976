"""A statically linked C++ runtime's own imports are the toolchain's, not the candidate's (seen on the H200 machine:
every honest CUDA module imported ``open``, ``secure_getenv`` and ``syscall`` from libstdc++'s code and was refused).

Real modules, linked here with ``-static-libstdc++`` by the machine's g++ (under a second each); skipped where the
compiler has no static runtime.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from musaenv.verification.binary_imports import binary_findings
from musaenv.verification.binary_runtime import runtime_archives, runtime_only_imports

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or not any(a.endswith("libstdc++.a") for a in runtime_archives("g++")),
    reason="needs g++ with a static libstdc++",
)

HONEST = r"""
#include <random>
#include <string>
#include <stdexcept>
struct Seed { Seed() : v(std::random_device{}()) {} unsigned v; };
extern "C" unsigned kernel(int n) {
    static Seed s;  // a guarded static: __cxa_guard_acquire, which waits with syscall(SYS_futex)
    std::string t(n, 'a');
    if (n < 0) throw std::runtime_error("negative");
    return s.v + t.size();
}
"""
# The runtime is in the module, and the candidate's own function opens a file as well.
OWN_OPEN = r"""
#include <random>
#include <fcntl.h>
extern "C" unsigned kernel(int n) { static std::random_device rd; return rd() + open("/etc/hostname", O_RDONLY); }
"""
# A runtime function's name, the candidate's code: its own __cxa_guard_acquire makes pages executable.
FORGED_GUARD = r"""
#include <unistd.h>
#include <sys/syscall.h>
extern "C" int __cxa_guard_acquire(long long* g) { return (int)syscall(SYS_mprotect, g, 4096, 7); }
extern "C" void __cxa_guard_release(long long* g) { *g = 1; }
extern "C" void __cxa_guard_abort(long long*) {}
struct S { S(); int v; };
S::S() : v(3) {}
extern "C" int kernel(int n) { static S s; return s.v + n; }
"""
# The address of open stored in data: not a call the runtime makes.
STORED = r"""
#include <random>
#include <fcntl.h>
extern "C" { int (*volatile opener)(const char*, int, ...) = open; }
extern "C" unsigned kernel(int n) { static std::random_device rd; return rd() + n; }
"""


def _module(tmp_path: Path, name: str, source: str) -> Path:
    src, so = tmp_path / f"{name}.cpp", tmp_path / f"{name}.so"
    src.write_text(source)
    cmd = ["g++", "-O2", "-fPIC", "-shared", str(src), "-static-libstdc++", "-o", str(so)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return so


def _messages(so: Path) -> list[str]:
    return [f.message for f in binary_findings(so, "strict") if f.is_error]


def test_an_honest_module_with_the_runtime_linked_in_is_not_refused(tmp_path: Path) -> None:
    so = _module(tmp_path, "honest", HONEST)
    assert {"open", "syscall"} <= runtime_only_imports(so, ["open", "syscall", "getenv"])
    assert _messages(so) == []


def test_the_candidates_own_call_is_refused_beside_the_runtimes(tmp_path: Path) -> None:
    so = _module(tmp_path, "own_open", OWN_OPEN)
    assert "open" not in runtime_only_imports(so, ["open"])
    assert any("imports open" in m for m in _messages(so))


def test_a_function_named_like_the_runtime_is_judged_by_its_code(tmp_path: Path) -> None:
    so = _module(tmp_path, "forged", FORGED_GUARD)
    assert runtime_only_imports(so, ["syscall"]) == set()
    assert any("imports syscall" in m for m in _messages(so))


def test_an_imports_address_stored_in_data_is_not_excused(tmp_path: Path) -> None:
    so = _module(tmp_path, "stored", STORED)
    assert "open" not in runtime_only_imports(so, ["open"])
    assert any("imports open" in m for m in _messages(so))


def test_without_a_static_runtime_nothing_is_excused(tmp_path: Path) -> None:
    so = _module(tmp_path, "plain", OWN_OPEN)
    assert runtime_only_imports(so, ["open"], cxx="/nonexistent/c++") == set()


# libstdc++'s file classes, linked in: no import names them, the candidate's call to them does.
FSTREAM = r"""
#include <fstream>
extern "C" long kernel() { std::ifstream f("/etc/hostname"); return f.good() ? 1 : 0; }
"""
# The same class's open kept as a member-function pointer in data, to be called through it later.
FSTREAM_STORED = r"""
#include <fstream>
using Open = std::filebuf* (std::filebuf::*)(const char*, std::ios_base::openmode);
extern "C" { Open volatile opener = &std::filebuf::open; }
extern "C" long kernel() { std::filebuf b; return (b.*opener)("/etc/hostname", std::ios_base::in) != nullptr; }
"""


def test_a_call_into_the_runtimes_file_classes_is_refused_when_they_are_linked_in(tmp_path: Path) -> None:
    so = _module(tmp_path, "fstream", FSTREAM)  # the constructor is inlined: its call to filebuf::open shows
    assert any("calls std::basic_filebuf::open" in m for m in _messages(so)), _messages(so)
    so = _module(tmp_path, "fstream_stored", FSTREAM_STORED)
    assert any("std::basic_filebuf::open" in m for m in _messages(so)), _messages(so)
