"""CuPy kernels compiled by NVRTC through CuPy without a GPU: a cubin for a good kernel, NVRTC's own log otherwise."""

from __future__ import annotations

import pytest

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the cupy extra (cupy-cuda13x, nvidia-cuda-nvrtc)")

from musaenv.toolchains.cupy_nvrtc import nvrtc_compile

ADD = r"""extern "C" __global__ void add(const float* a, const float* b, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}"""


def test_a_raw_kernel_source_compiles_to_a_cubin_without_a_device():
    r = nvrtc_compile(ADD, arch=90)
    assert r.ok and r.cubin_bytes > 0, r.log
    assert r.options[:2] == ("-arch=sm_90", "-ftz=true")
    assert r.seconds < 30


def test_a_kernel_error_is_nvrtcs_own_diagnostic():
    r = nvrtc_compile(ADD.replace("a[i] + b[i]", "a[i] + undefined_name"), name="cand.cu")
    assert not r.ok and r.cubin_bytes == 0
    assert 'cand.cu(3): error: identifier "undefined_name" is undefined' in r.log


def test_template_instantiations_are_compiled_by_name_expression():
    src = "template <int N> __global__ void fill(float* x) { x[threadIdx.x] = N; }"
    assert nvrtc_compile(src, name_expressions=["fill<4>"]).ok
    bad = 'template <int N> __global__ void fill(float* x) { static_assert(N < 4, "too big"); x[0] = N; }'
    r = nvrtc_compile(bad, name_expressions=["fill<8>"])
    assert not r.ok and "too big" in r.log


def test_the_candidate_cannot_change_the_architecture_or_includes():
    r = nvrtc_compile(ADD, arch=90, options=["-arch=sm_50", "-I/etc", "--use_fast_math"])
    assert r.ok and "-arch=sm_50" not in r.options and "-I/etc" not in r.options and "--use_fast_math" in r.options


def test_cupys_own_and_the_toolkits_headers_are_found_as_cupy_finds_them():
    from musaenv import _env

    if _env.cuda_home() is None:
        pytest.skip("the toolkit's headers (cuda_fp16.h) come from a CUDA toolkit; none here")
    src = """#include <cuda_fp16.h>
#include <cupy/complex.cuh>
extern "C" __global__ void k(__half* x, complex<float>* z) { x[0] = __float2half(1.f); z[0] = z[0] * z[0]; }"""
    r = nvrtc_compile(src)
    assert r.ok, r.log
