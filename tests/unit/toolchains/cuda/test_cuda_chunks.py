"""C language linkage in the CUDA split: ``extern "C"`` kernels and blocks placed like the same code without it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from musaenv import _env
from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.cuda.compile import _CUDA_PRELUDE
from musaenv.toolchains.cuda.fast import cuda_fast_build
from musaenv.toolchains.cuda.split import split_cuda
from musaenv.toolchains.loader import pch_cache_root
from tests.unit.toolchains.cuda.test_cuda_fast import bound  # noqa: F401 (the fixture the slow tests use)

C_KERNEL = r"""
#include <torch/extension.h>

extern "C" __global__ void scale_kernel(const float* x, float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s * x[i];
}

extern "C" {
    __device__ float twice(float v) { return 2.0f * v; }

    __global__ void twice_kernel(float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = twice(y[i]);
    }

    torch::Tensor scale_cuda(torch::Tensor x, double s) {
        auto y = torch::empty_like(x);
        int n = x.numel();
        scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
        twice_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
        return y;
    }
}
"""


def _split(source: str):
    return split_cuda(source, _CUDA_PRELUDE)


def test_c_linkage_kernels_and_blocks_are_carried_as_written_on_their_side():
    s = _split(C_KERNEL)
    assert s is not None and s.kernels == ("scale_kernel", "twice_kernel")
    assert 'extern "C" __global__ void scale_kernel(const float* x' in s.device
    assert re.search(r'extern "C" \{\s*__device__ float twice\(float v\)', s.device)  # a block of its own each
    assert re.search(r'extern "C" \{\s*__global__ void twice_kernel\(float\* y, int n\)', s.device)
    assert "scale_cuda" not in s.device and "torch" not in s.device
    assert re.search(r'extern "C" \{\s*torch::Tensor scale_cuda\(torch::Tensor x, double s\)', s.host)
    assert "musaenv_launch_scale_kernel((n + 255) / 256, 256, 0, 0, x.data_ptr<float>()" in s.host
    assert "__global__" not in s.host and "<<<" not in s.host and "2.0f * v" not in s.host


def test_c_linkage_device_functions_are_declared_in_the_host_unit_with_a_return_type_of_their_own():
    # A C function of the same name that torch's headers declare (the unsplit unit has them, the device unit not)
    # then fails the host compile as it fails the unsplit one; none that the headers lack is disturbed.
    s = _split(C_KERNEL)
    assert s is not None
    for decl in ('extern "C" struct musaenv_c_linkage* scale_kernel(const float* x, float* y, float s, int n);',
                 'extern "C" struct musaenv_c_linkage* twice(float v);',
                 'extern "C" struct musaenv_c_linkage* twice_kernel(float* y, int n);'):  # fmt: skip
        assert decl in s.host


def test_chunks_inside_a_linkage_block_keep_their_lines_of_cuda_cu():
    s = _split(C_KERNEL)
    assert s is not None
    cuda_cu = "\n".join([*_CUDA_PRELUDE, C_KERNEL]).splitlines()
    line, file = 0, ""
    for text in s.device.splitlines():
        mark = re.match(r'#line (\d+) "(.+)"$', text)
        if mark:
            line, file = int(mark.group(1)), mark.group(2)
            continue
        if file == "cuda.cu" and "void twice_kernel(" in text:
            assert cuda_cu[line - 1].strip() == "__global__ void twice_kernel(float* y, int n) {"
            return
        line += 1
    raise AssertionError("twice_kernel not found under a #line mark")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('extern "C" {\n    __device__', 'extern "C++" {\n    __device__'),  # another linkage
        ('extern "C" {\n    __device__', 'extern "C" {\n extern "C" { }\n    __device__'),  # a block in a block
        ('extern "C" {\n    __device__', 'extern "C" {\n#include <cmath>\n    __device__'),  # a #-line inside
        ("extern \"C\" {\n    __device__", "extern \"C\" __constant__ float W[4];\nextern \"C\" {\n    __device__"),
        ("extern \"C\" {\n    __device__", "extern \"C\" const int N = 4;\nextern \"C\" {\n    __device__"),
        ("extern \"C\" {\n    __device__", "extern \"C\" {\n template <typename T> __device__ T id(T v) "
         "{ return v; }\n    __device__"),  # a template has no C linkage: nvcc's error, judged as written
    ],
    ids=["cpp_linkage", "nested", "directive", "device_variable", "const_copy", "template"],
)  # fmt: skip
def test_linkage_the_split_cannot_place_for_certain_is_built_as_written(old, new):
    assert old in C_KERNEL
    assert _split(C_KERNEL.replace(old, new)) is None


def _spec(cuda: str, cpp: str, functions: list[str]) -> tuple[dict[str, Any], str]:
    spec = BuildSpec.from_load_inline(
        {"cpp_sources": cpp, "cuda_sources": cuda, "functions": functions}, "cuda", compile_only=True
    )
    return {**spec.to_dict(), "timeout_s": 600}, spec.name


@pytest.mark.slow
@pytest.mark.usefixtures("bound")
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_c_linkage_builds_through_the_split_and_a_linkage_mismatch_is_left_to_the_build_as_written(tmp_path):
    spec, name = _spec(C_KERNEL, 'extern "C" torch::Tensor scale_cuda(torch::Tensor x, double s);', ["scale_cuda"])
    res = cuda_fast_build(spec, name, tmp_path, pch_cache_root())
    assert res is not None and res.ok and res.kernels == ("scale_kernel", "twice_kernel"), res
    # main.cpp declares it with C++ linkage, the source defines it with C linkage: torch's import fails on an
    # undefined symbol; the split does not say "builds" (its link is abandoned), the build as written decides.
    spec, name = _spec(C_KERNEL, "torch::Tensor scale_cuda(torch::Tensor x, double s);", ["scale_cuda"])
    (tmp_path / "b").mkdir()
    declined: list[dict[str, str]] = []
    assert cuda_fast_build(spec, name, tmp_path / "b", pch_cache_root(), declined=declined) is None
    assert "abandoned" in str(declined) and "undefined reference to `scale_cuda(at::Tensor" in str(declined), declined


@pytest.mark.slow
@pytest.mark.usefixtures("bound")
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_a_c_linkage_kernel_named_like_a_c_function_of_torchs_headers_is_left_to_the_build_as_written(tmp_path):
    # pthread.h (which torch's headers include, the device unit not) declares pthread_self with C linkage: the
    # unsplit unit fails on the kernel of that name, and so does the split's host unit (its own declaration).
    src = C_KERNEL.replace("scale_kernel", "pthread_self")
    assert _split(src) is not None
    spec, name = _spec(src, 'extern "C" torch::Tensor scale_cuda(torch::Tensor x, double s);', ["scale_cuda"])
    declined: list[dict[str, str]] = []
    assert cuda_fast_build(spec, name, tmp_path, pch_cache_root(), declined=declined) is None
    assert "abandoned" in str(declined) and "pthread_t pthread_self()" in str(declined), declined
