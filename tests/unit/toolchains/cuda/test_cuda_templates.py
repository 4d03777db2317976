"""Template kernels in the CUDA split: the shims instantiate exactly what the unsplit unit's launches do."""

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

TILED = r"""
#include <torch/extension.h>
#define WIDTH 8

template <typename scalar_t, int BLOCK, bool CLAMP>
__global__ void tiled_kernel(const scalar_t* x, scalar_t* y, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = CLAMP && x[i] < 0 ? scalar_t(0) : x[i] * scalar_t(WIDTH);
}

torch::Tensor tiled_cuda(torch::Tensor x, bool clamp) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    const int block_size = 128;
    AT_DISPATCH_ALL_TYPES(x.scalar_type(), "tiled_cuda", ([&] {
        if (clamp) {
            tiled_kernel<scalar_t, block_size, true><<<(n + 127) / 128, block_size>>>(
                x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
        } else {
            tiled_kernel<scalar_t, WIDTH, false><<<(n + 7) / 8, WIDTH>>>(
                x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
        }
    }));
    return y;
}
"""

ALL_TYPES = ("uint8_t", "int8_t", "int", "int64_t", "int16_t", "double", "float")


def _split(source: str):
    return split_cuda(source, _CUDA_PRELUDE)


def _instances(device: str, kernel: str) -> set[str]:
    return set(re.findall(rf"template void musaenv_launch_{kernel}<([^>]*)>", device))


def test_type_and_integral_parameters_are_instantiated_for_each_launch_exactly():
    s = _split(TILED)
    assert s is not None and s.kernels == ("tiled_kernel",)
    assert "template <typename scalar_t, int BLOCK, bool CLAMP> void musaenv_launch_tiled_kernel(" in s.host
    assert "tiled_kernel<scalar_t, BLOCK, CLAMP><<<musaenv_g, musaenv_b, musaenv_s, musaenv_st>>>" in s.device
    # AT_DISPATCH_ALL_TYPES' seven types, times the local constant (128, true) and the macro (8, false) launches
    want = {f"{t}, 128, true" for t in ALL_TYPES} | {f"{t}, 8, false" for t in ALL_TYPES}
    assert _instances(s.device, "tiled_kernel") == want
    assert "template void musaenv_launch_tiled_kernel<int64_t, 8, false>(dim3, dim3, size_t, cudaStream_t, " \
           "const int64_t* x, int64_t* y, int n);" in s.device  # fmt: skip
    assert "musaenv_launch_tiled_kernel<scalar_t, block_size, true>((n + 127) / 128, block_size, 0, 0," in s.host


def test_integral_dispatch_instantiates_only_integer_types():
    s = _split(TILED.replace("AT_DISPATCH_ALL_TYPES(", "AT_DISPATCH_INTEGRAL_TYPES("))
    assert s is not None
    assert {i.split(",")[0] for i in _instances(s.device, "tiled_kernel")} == set(ALL_TYPES[:5])


def test_identity_alias_of_scalar_t_is_the_dispatchs_own_type():
    src = TILED.replace("if (clamp) {", "using scalar_t = scalar_t;\n        if (clamp) {")
    s = _split(src)
    assert s is not None and len(_instances(s.device, "tiled_kernel")) == 14


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("if (clamp) {", "using scalar_t = float;\n        if (clamp) {"),  # its own scalar_t: not the dispatch's
        ("AT_DISPATCH_ALL_TYPES(", "AT_DISPATCH_ALL_TYPES_AND_HALF("),  # c10::Half, a torch type
        ("AT_DISPATCH_ALL_TYPES(", "AT_DISPATCH_V2("),  # a dispatch whose types are not read
        ("#define WIDTH 8", "#define WIDTH 8\n#undef WIDTH\n#define WIDTH 16"),  # a macro defined twice
        ("const int block_size = 128;", "{ const int block_size = 128; }"),  # its block closed before the launch
        ("const int block_size = 128;", "int block_size = 128;"),  # not a constant
        ("const int block_size = 128;", "const int block_size = 128;\n    int* p = nullptr; (void)p;\n"
         "    { int& block_size = n; (void)block_size; }"),  # another declaration of the name
        ("bool CLAMP>", "bool CLAMP = false>"),  # a default argument
        ("if (clamp) {", "if constexpr (true) {"),  # a discarded branch instantiates nothing
        ("tiled_kernel<scalar_t, WIDTH, false><<<", "tiled_kernel<scalar_t, n, false><<<"),  # a run-time value
    ],
    ids=["own_scalar_t", "half", "v2", "macro_twice", "closed_block", "not_const", "shadowed", "default",
         "if_constexpr", "runtime"],
)  # fmt: skip
def test_template_arguments_not_known_for_certain_are_built_as_written(old, new):
    assert old in TILED
    assert _split(TILED.replace(old, new)) is None


def test_a_launch_outside_any_dispatch_does_not_read_scalar_t():
    src = TILED.replace('AT_DISPATCH_ALL_TYPES(x.scalar_type(), "tiled_cuda", ([&] {', "{").replace("}));", "}")
    assert _split(src) is None


HOSTED = r"""
#include <torch/extension.h>

template <typename T>
__global__ void neg_kernel(const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = -x[i];
}

template <typename T>
torch::Tensor neg_typed(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    neg_kernel<T><<<(n + 255) / 256, 256>>>(x.data_ptr<T>(), y.data_ptr<T>(), n);
    return y;
}

torch::Tensor neg_cuda(torch::Tensor x) {
    if (x.scalar_type() == torch::kInt) {
        return neg_typed<int>(x);
    }
    return neg_typed<float>(x);
}
"""


def test_a_launch_in_a_host_template_is_instantiated_for_the_calls_of_that_template():
    s = _split(HOSTED)
    assert s is not None and _instances(s.device, "neg_kernel") == {"int", "float"}
    assert "musaenv_launch_neg_kernel<T>((n + 255) / 256, 256, 0, 0, x.data_ptr<T>()" in s.host
    calls = "if (x.scalar_type() == torch::kInt) {\n        return neg_typed<int>(x);\n    }\n"
    calls += "    return neg_typed<float>(x);"
    dispatch = 'torch::Tensor y;\n    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "neg", ([&] {\n'
    dispatch += "        y = neg_typed<scalar_t>(x);\n    }));\n    return y;"
    assert calls in HOSTED
    dispatched = HOSTED.replace(calls, dispatch)
    s = _split(dispatched)
    assert s is not None and _instances(s.device, "neg_kernel") == {"double", "float"}


def test_a_host_template_never_called_instantiates_nothing():
    s = _split(HOSTED.replace("neg_typed<int>(x)", "x").replace("neg_typed<float>(x)", "x"))
    assert s is not None and _instances(s.device, "neg_kernel") == set()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("return neg_typed<float>(x);", "return neg_typed(x);"),  # deduced (here: not even deducible)
        ("return neg_typed<float>(x);", "auto f = &neg_typed<float>;\n    return f(x);"),  # an address
        ("return y;\n}\n\ntorch::Tensor neg_cuda", "return n ? neg_typed<T>(y) : y;\n}\n\ntorch::Tensor neg_cuda"),
        ("torch::Tensor neg_cuda(", "template <int N> torch::Tensor neg_n(torch::Tensor x) {\n"
         "    return neg_typed<float>(x);\n}\ntorch::Tensor neg_cuda("),  # called from another template
        ("neg_kernel<T><<<", "if constexpr (sizeof(T) == 4) neg_kernel<T><<<"),
    ],
    ids=["deduced", "address", "recursive", "from_template", "if_constexpr"],
)  # fmt: skip
def test_host_templates_whose_instances_are_not_known_are_built_as_written(old, new):
    assert old in HOSTED
    assert _split(HOSTED.replace(old, new)) is None


def _spec(cuda: str, decl: str, function: str) -> tuple[dict[str, Any], str]:
    spec = BuildSpec.from_load_inline(
        {"cpp_sources": decl, "cuda_sources": cuda, "functions": [function]}, "cuda", compile_only=True
    )
    return {**spec.to_dict(), "timeout_s": 600}, spec.name


@pytest.mark.slow
@pytest.mark.usefixtures("bound")
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_template_kernels_of_the_new_shapes_build_through_the_split(tmp_path):
    for i, (src, decl, fn) in enumerate([
        (TILED, "torch::Tensor tiled_cuda(torch::Tensor x, bool clamp);", "tiled_cuda"),
        (HOSTED, "torch::Tensor neg_cuda(torch::Tensor x);", "neg_cuda"),
    ]):  # fmt: skip
        spec, name = _spec(src, decl, fn)
        (tmp_path / str(i)).mkdir()
        res = cuda_fast_build(spec, name, tmp_path / str(i), pch_cache_root())
        assert res is not None and res.ok and res.tier == "split", res


@pytest.mark.slow
@pytest.mark.usefixtures("bound")
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_an_error_only_some_dispatched_types_show_is_judged_by_the_types_dispatched(tmp_path):
    # ``%`` on scalar_t: every integer instance compiles, double and float do not. Under the integral dispatch the
    # split builds it (no floating instance is compiled, as in the unsplit unit); under all types the floating
    # instances' error is the verdict, in cuda.cu's lines.
    src = TILED.replace("x[i] * scalar_t(WIDTH)", "x[i] % scalar_t(WIDTH)")
    spec, name = _spec(src.replace("AT_DISPATCH_ALL_TYPES(", "AT_DISPATCH_INTEGRAL_TYPES("),
                       "torch::Tensor tiled_cuda(torch::Tensor x, bool clamp);", "tiled_cuda")  # fmt: skip
    (tmp_path / "a").mkdir()
    res = cuda_fast_build(spec, name, tmp_path / "a", pch_cache_root())
    assert res is not None and res.ok, res
    spec, name = _spec(src, "torch::Tensor tiled_cuda(torch::Tensor x, bool clamp);", "tiled_cuda")
    (tmp_path / "b").mkdir()
    res = cuda_fast_build(spec, name, tmp_path / "b", pch_cache_root())
    assert res is not None and not res.ok and "must have integral or unscoped enum type" in res.log, res
    assert "cuda.cu(" in res.log and "scalar_t=double" in res.log and "scalar_t=int" not in res.log, res.log
