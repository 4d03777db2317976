"""Compile-only checks of CUDA candidates with nvcc and no GPU (slow: each real compile takes 20-100 s here)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from musaenv import _env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_env.cuda_home() is None, reason="no CUDA toolkit (CUDA_HOME or /usr/local/cuda with bin/nvcc)"),
]
pytest.importorskip("torch", reason="the check compiles against torch's headers")

from musaenv.toolchains.cuda.compile import cuda_compile_check  # noqa: E402

KERNEL = """
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::zeros_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
DECL = "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"


def _leftover_compilers() -> list[str]:
    """Command lines of live processes that belong to a compile check's private build directory."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "musaenv-cc-" in text:
            found.append(text)
    return found


def test_a_correct_elementwise_candidate_compiles() -> None:
    result = cuda_compile_check([DECL], [KERNEL], ["elementwise_add_cuda"], extra_cuda_cflags=["-O3", "-arch=sm_80"])
    assert result.ok, result.log
    assert result.inconclusive is None
    assert [s["name"] for s in result.steps] == ["cuda", "cpp", "link"]  # linked as torch links, then resolved
    assert all(s["returncode"] == 0 for s in result.steps[:2])
    assert "accepted unresolved" in result.steps[2]["note"]  # c10::cuda symbols: libc10_cuda is not in a CPU wheel
    assert "replaced by -arch=sm_90" in result.steps[0]["note"]
    assert json.loads(json.dumps(result.to_dict()))["ok"] is True


def test_a_syntax_error_in_a_kernel_fails_with_nvccs_message_naming_the_line() -> None:
    broken = KERNEL.replace("out[i] = a[i] + b[i];", "out[i] = a[i] + b[i]")
    result = cuda_compile_check([], [broken], None)
    assert not result.ok and result.inconclusive is None
    # The kernel body's line 4, after the three headers load_inline prepends to cuda.cu.
    assert 'cuda.cu(8): error: expected a ";"' in result.log
    assert [s["name"] for s in result.steps] == ["cuda"]


def test_a_binding_to_an_undeclared_function_fails_in_the_cpp_step() -> None:
    result = cuda_compile_check([DECL], [], ["elementwise_add"])
    assert not result.ok and result.inconclusive is None
    # main.cpp: the torch/extension.h include, the declaration, then load_inline's PYBIND11_MODULE block.
    assert re.search(r"main\.cpp:4:\d+: error: 'elementwise_add' was not declared in this scope", result.log)
    assert result.log.startswith("== cpp:")


def test_a_timeout_kills_nvcc_and_its_children() -> None:
    result = cuda_compile_check([], [KERNEL], None, timeout_s=2)
    assert not result.ok
    (step,) = result.steps
    assert step["timed_out"] and step["returncode"] is None
    assert "killed after" in result.log
    deadline = time.monotonic() + 10.0  # SIGKILL is asynchronous: give the kernel a moment to reap the tree
    while _leftover_compilers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _leftover_compilers() == []


def test_a_header_missing_from_this_toolkit_is_inconclusive_not_a_verdict() -> None:
    home = _env.cuda_home()
    assert home is not None
    if (home / "include" / "cusparse.h").exists():
        pytest.skip("this CUDA toolkit has cuSPARSE headers, so ATen/cuda/CUDAContext.h compiles")
    source = "#include <ATen/cuda/CUDAContext.h>\n" + KERNEL
    result = cuda_compile_check([], [source], None)
    assert not result.ok
    assert result.inconclusive is not None and "cusparse.h" in result.inconclusive
    assert "cusparse.h: No such file or directory" in result.log


def test_a_missing_user_header_is_a_real_failure() -> None:
    result = cuda_compile_check([], ["#include <no_such_header_anywhere.h>\n" + KERNEL], None)
    assert not result.ok and result.inconclusive is None
    assert "no_such_header_anywhere.h" in result.log


def test_a_failing_step_stops_the_other_and_a_missing_toolkit_header_stays_inconclusive() -> None:
    home = _env.cuda_home()
    assert home is not None
    if (home / "include" / "cusparse.h").exists():
        pytest.skip("this CUDA toolkit has cuSPARSE headers, so ATen/cuda/CUDAContext.h compiles")
    source = "#include <ATen/cuda/CUDAContext.h>\n" + KERNEL
    result = cuda_compile_check([DECL], [source], ["elementwise_add_cuda"])
    assert not result.ok
    assert result.inconclusive is not None and "cusparse.h" in result.inconclusive  # the stopped step is no verdict
    steps = {s["name"]: s for s in result.steps}
    assert "stopped: the cuda step failed first" in steps["cpp"]["note"]  # g++ on torch/extension.h is not awaited
    assert result.log.startswith("== cuda:") and "(stopped)" in result.log
