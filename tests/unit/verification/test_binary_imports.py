"""The built-module check: each imported symbol judged by name (no build), and a real module's imports read back."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from musaenv.verification.binary_imports import (
    _plain_name,
    binary_findings,
    imported_symbols,
    judge_symbol,
    syscall_instructions,
)


@pytest.mark.parametrize(
    ("demangled", "plain"),
    [
        ("float* at::TensorBase::data_ptr<float>() const", "at::TensorBase::data_ptr"),
        ("at::_ops::add_Tensor::call(at::Tensor const&, c10::Scalar const&)", "at::_ops::add_Tensor::call"),
        ("dlsym@GLIBC_2.34", "dlsym"),
        ("vtable for c10::OperatorKernel", "c10::OperatorKernel"),
        ("std::vector<int, std::allocator<int> >::operator()(long)", "std::vector::operator()"),
    ],
)  # fmt: skip
def test_a_demangled_symbol_reads_as_its_qualified_name(demangled: str, plain: str) -> None:
    assert _plain_name(demangled) == plain


@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("at::_ops::addmm::call", "library_compute"),
        ("at::_ops::add_Tensor::call", "library_compute"),
        ("at::_ops::float_power_Tensor_Scalar::call", "library_compute"),  # not the cast float()
        ("at::_ops::empty_like::redispatch", "library_compute"),  # any redispatch
        ("at::native::relu", "library_compute"),
        ("at::native::cpublas::gemm", "library_compute"),
        ("at::cpu::clamp_min", "library_compute"),
        ("sgemm_", "vendor_library"),
        ("cblas_sgemm", "vendor_library"),
        ("c10::Dispatcher::realSingleton", "monkeypatch"),
        ("torch::Library::_def", "monkeypatch"),
        ("torch::detail::TorchLibraryInit::TorchLibraryInit", "monkeypatch"),
        ("torch::jit::getOperation", "graph_replay"),
        ("at::enableRecordFunction", "profiler_tampering"),
        ("dlopen", "dynamic_code"),
        ("mprotect", "memory_or_signal"),
        ("sigaction", "memory_or_signal"),
        ("mmap64", "memory_or_signal"),
        ("PyEval_GetFrame", "introspection"),
        ("PyThreadState_GetFrame", "introspection"),
        ("PyImport_ImportModule", "introspection"),
        ("PySys_GetObject", "introspection"),
        ("std::basic_filebuf::open", "file_access"),  # libstdc++'s file classes: open(2) called inside the library
        ("std::basic_ofstream::basic_ofstream", "file_access"),
        ("std::__basic_file::sys_open", "file_access"),
        ("std::filesystem::__cxx11::directory_iterator::directory_iterator", "file_access"),
    ],
)
def test_what_reaches_library_compute_or_the_harness_is_refused(name: str, flag: str) -> None:
    got = judge_symbol(name)
    assert got is not None and got[0] == flag, (name, got)


@pytest.mark.parametrize(
    "name",
    [
        "at::_ops::empty_like::call", "at::_ops::zeros_like::call", "at::_ops::empty_memory_format::call",
        "at::_ops::view::call", "at::_ops::to_dtype::call", "at::_ops::copy_::call", "at::_ops::_to_copy::call",
        "at::TensorBase::__dispatch_contiguous", "c10::TensorImpl::set_autograd_meta", "at::cpu::empty",
        "c10::impl::ExcludeDispatchKeyGuard::ExcludeDispatchKeyGuard", "std::thread::_M_start_thread", "GOMP_parallel",
        "omp_get_thread_num", "expf", "memcpy", "Sleef_expf8_u10", "PyFrame_GetBack", "PyObject_GetAttrString",
        "pybind11::detail::type_caster::load", "at::isRecordFunctionEnabled", "at::internal::invoke_parallel",
    ],
)  # fmt: skip
def test_plumbing_and_runtimes_pass(name: str) -> None:
    assert judge_symbol(name) is None, name


def test_library_compute_follows_the_policy_and_the_rest_does_not(tmp_path: Path) -> None:
    if shutil.which("gcc") is None or shutil.which("nm") is None:
        pytest.skip("needs gcc and binutils")
    src = tmp_path / "m.c"
    src.write_text(
        '#include <dlfcn.h>\nextern void sgemm_(void);\nvoid* f(void) { sgemm_(); return dlsym(RTLD_DEFAULT, "x"); }\n'
    )
    so = tmp_path / "m.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(so)], check=True, capture_output=True)
    assert {"sgemm_", "dlsym"} <= {s.split("@")[0] for s in imported_symbols(so)}
    strict = {(f.flag, f.severity) for f in binary_findings(so, "strict")}
    assert strict == {("vendor_library", "error"), ("dynamic_code", "error")}
    lenient = {(f.flag, f.severity) for f in binary_findings(so, "kernelbench")}
    assert lenient == {("vendor_library", "warning"), ("dynamic_code", "error")}
    assert {(f.flag, f.severity) for f in binary_findings(so, "off")} == {("dynamic_code", "error")}


def test_the_op_schemas_are_read_without_torch_in_the_judging_process(tmp_path):
    """The parent judges binaries and never imports torch for it: the schema list comes from a child interpreter
    once, then from the sealed cache (a process that imported torch anyway reads it in place)."""
    import json
    import os
    import subprocess
    import sys

    from musaenv.verification.libtorch_symbols import _schema_ops_here

    script = (
        "import json, sys; from musaenv.verification.libtorch_symbols import aten_op_structs; "
        "d = aten_op_structs(); print(json.dumps([d, 'torch' in sys.modules]))"
    )
    env = {**os.environ, "MUSAENV_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):  # the first from the child interpreter, the second from the sealed file it left
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    assert list((tmp_path / "symbols").glob("ops-*.json"))
    here = _schema_ops_here()
    for ops, imported_torch in runs:
        assert not imported_torch
        assert ops == here and ops["add_Tensor"] == "add"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 instruction bytes")
def test_a_system_call_instruction_is_refused_however_the_source_spelled_it(tmp_path: Path) -> None:
    if shutil.which("gcc") is None or shutil.which("objdump") is None:
        pytest.skip("needs gcc and binutils")
    bodies = {
        "bytes": 'long r; __asm__ volatile(".byte 0x0f, 0x05" : "=a"(r) : "a"(39L) : "rcx", "r11"); return r;',
        "libc": "return (long)getpid();",  # the same call through libc: an import, no instruction of its own
    }
    found = {}
    for name, body in bodies.items():
        src, so = tmp_path / f"{name}.c", tmp_path / f"{name}.so"
        src.write_text(f"#include <unistd.h>\nlong f(void) {{ {body} }}\n")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(so)], check=True, capture_output=True)
        found[name] = {(f.flag, f.severity) for f in binary_findings(so, "off")}
        if name == "bytes":
            assert [i.split(": ")[1] for i in syscall_instructions(so)] == ["syscall"]
    assert found == {"bytes": {("raw_syscall", "error")}, "libc": set()}
