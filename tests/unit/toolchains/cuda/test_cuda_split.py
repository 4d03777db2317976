"""The CUDA source split: device code without torch, host code without kernels, or no split at all."""

from __future__ import annotations

import re

import pytest

from musaenv import _env
from musaenv.toolchains.cuda.compile import _CUDA_PRELUDE
from musaenv.toolchains.cuda.split import flags_allow_split, split_cuda

KB_ADD = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
const int BLOCK = 256;  // shared by kernel and launcher
struct Pair { float a, b; };

__device__ __forceinline__ float add2(float a, float b) { return a + b; }

__global__ void __launch_bounds__(256) add_kernel(const float* __restrict__ a, /* in */ const float* b,
                                                  float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) out[idx] = add2(a[idx], b[idx]);  // not a launch: k<<<1, 1>>>(x)
}

static int blocks_for(int n) { return (n + BLOCK - 1) / BLOCK; }

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    CHECK_CUDA(a);
    auto out = torch::zeros_like(a);
    int n = a.numel();
    const char* s = "}{ <<< ";
    add_kernel<<<blocks_for(n), BLOCK>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    add_kernel<<<1, 1, 0>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), 0);
    return out;
}
"""


def _split(source: str):
    return split_cuda(source, _CUDA_PRELUDE)


def test_kernelbench_shape_splits_into_torch_free_device_code_and_kernel_free_host_code():
    s = _split(KB_ADD)
    assert s is not None and s.kernels == ("add_kernel",)
    assert "torch" not in s.device and "TORCH_CHECK(x.is_cuda()" in s.device  # the macro is defined, never used
    assert "__global__ void __launch_bounds__(256) add_kernel" in s.device
    assert "add_kernel<<<musaenv_g, musaenv_b, musaenv_s, musaenv_st>>>(a, b, out, size);" in s.device
    assert "struct Pair" in s.device and "struct Pair" in s.host and "const int BLOCK" in s.host
    assert "add2" not in s.host and "__global__" not in s.host
    assert "musaenv_launch_add_kernel(blocks_for(n), BLOCK, 0, 0, a.data_ptr<float>()" in s.host
    assert "musaenv_launch_add_kernel(1, 1, 0, 0, a.data_ptr<float>()" in s.host
    assert s.host.startswith("\n".join(_CUDA_PRELUDE))
    assert '"}{ <<< "' in s.host  # string literals are left alone
    decl = s.host.index("void musaenv_launch_add_kernel(")
    assert decl < s.host.index("torch::Tensor add_cuda(")  # declared where the kernel was defined


def test_launch_shims_keep_the_kernels_parameter_types_verbatim():
    s = _split(KB_ADD)
    assert s is not None
    sig = "dim3 musaenv_g, dim3 musaenv_b, size_t musaenv_s, cudaStream_t musaenv_st, const float* __restrict__ a, "
    assert re.search(re.escape(sig) + r"const float\* b, float\* out, int size\)", s.host)


def test_a_launch_before_the_kernel_is_declared_is_built_as_written():
    early = "torch::Tensor first(torch::Tensor a) {\n add_kernel<<<1, 1>>>(nullptr, nullptr, nullptr, 0); return a; }\n"
    assert _split(KB_ADD.replace("__device__ __forceinline__", early + "__device__ __forceinline__")) is None


@pytest.mark.parametrize(
    "change",
    [
        ("__global__ void __launch_bounds__(256) add_kernel", "template <typename T>\n__global__ void add_kernel"),
        ("const int BLOCK = 256;", "#ifdef FAST\nconst int BLOCK = 256;\n#else\nconst int BLOCK = 128;\n#endif"),
        ("return out;\n}", "cudaFuncSetAttribute(add_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0);\n"
         "return out;\n}"),
        ("int idx = blockIdx.x", "at::Half h; int idx = blockIdx.x"),
        ("struct Pair { float a, b; };", "namespace kern { struct Pair { float a, b; }; }"),
        ("const int BLOCK = 256;", "__constant__ float W[4];\nconst int BLOCK = 256;"),
        ("#include <cuda_runtime.h>", '#include "my_helpers.cuh"'),
        ("int idx", "#if __CUDA_ARCH__ >= 800\n#endif\nint idx"),
    ],
    ids=["template_kernel", "conditional", "kernel_address", "torch_in_device", "namespace", "constant_unused_ok",
         "local_include", "cuda_arch"],
)  # fmt: skip
def test_sources_the_split_cannot_place_for_certain_are_built_as_written(change):
    src = KB_ADD.replace(*change)
    assert src != KB_ADD
    s = _split(src)
    if change[1].startswith("__constant__"):  # a device variable the host never names stays in the device part
        assert s is not None and "__constant__ float W[4]" in s.device and "W[4]" not in s.host
    else:
        assert s is None


def test_host_code_naming_a_device_symbol_is_not_split():
    src = KB_ADD.replace("const int BLOCK = 256;", "__constant__ float W[4];\nconst int BLOCK = 256;")
    src = src.replace("return out;\n}", "float w[4] = {}; cudaMemcpyToSymbol(W, w, sizeof(w));\nreturn out;\n}")
    assert _split(src) is None


def test_nothing_to_launch_and_unbalanced_sources_are_not_split():
    assert _split("torch::Tensor f(torch::Tensor x) { return x; }") is None
    assert _split(KB_ADD + "\n}") is None
    assert _split(KB_ADD.replace("*/", "")) is None


def test_flags_that_change_linking_or_warnings_keep_the_source_whole():
    assert flags_allow_split(["-O3", "--use_fast_math", "-Xptxas", "-v", "-DBLOCK=128"])
    assert not flags_allow_split(["-rdc=true"]) and not flags_allow_split(["-Xcompiler", "-Werror"])


def test_device_lines_carry_their_place_in_cuda_cu():
    # nvcc's messages on the device unit then name the lines of the unsplit cuda.cu (load_inline's header lines,
    # then the sources), and musaenv's own lines (the shims) their place in the device unit.
    s = _split(KB_ADD)
    assert s is not None
    cuda_cu = "\n".join([*_CUDA_PRELUDE, KB_ADD]).splitlines()
    file, line, first, seen = None, 0, False, 0
    for n, text in enumerate(s.device.splitlines(), start=1):
        mark = re.match(r'#line (\d+) "(.+)"$', text)
        if mark:
            line, file, first = int(mark.group(1)), mark.group(2), True
            continue
        if file == "cuda.cu":
            # a chunk may start or end mid-line (a declaration, then a comment): a part of that line, in place
            assert cuda_cu[line - 1] == text or (text.strip() and text in cuda_cu[line - 1]) or first, (line, text)
            seen += 1
        elif file == "musaenv_device.cu":
            assert line == n
        line, first = line + 1, False
    assert seen >= 8 and '"musaenv_device.cu"' in s.device


KB_TEMPLATE = r"""
#include <torch/extension.h>

template <typename scalar_t>
__global__ void add_kernel(const scalar_t* a, const scalar_t* b, scalar_t* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) out[idx] = a[idx] + b[idx];
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::zeros_like(a);
    int n = a.numel();
    AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "add_cuda", ([&] {
        add_kernel<scalar_t><<<(n + 255) / 256, 256>>>(a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(),
                                                       out.data_ptr<scalar_t>(), n);
    }));
    return out;
}
"""


def test_a_template_kernel_launched_from_a_host_template_never_called_gets_no_instance():
    # The host template is never instantiated: an explicit instance would compile what the unsplit unit never does,
    # and its errors would be the split's verdict (cuda_fast.device_verdict). Called ones: test_cuda_templates.py.
    src = KB_TEMPLATE.replace("torch::Tensor add_cuda(", "template <int N> torch::Tensor add_cuda_t(")
    s = _split(src)
    assert s is not None and "template void" not in s.device
    assert "template void musaenv_launch_add_kernel<float>" in (_split(KB_TEMPLATE) or s).device


def test_a_template_kernel_dispatched_over_floating_types_gets_a_shim_for_double_and_float():
    s = _split(KB_TEMPLATE)
    assert s is not None and s.kernels == ("add_kernel",)
    assert "template <typename scalar_t> void musaenv_launch_add_kernel(" in s.host  # declared only
    assert "musaenv_launch_add_kernel<scalar_t>((n + 255) / 256, 256, 0, 0, a.data_ptr<scalar_t>()" in s.host
    for t in ("double", "float"):  # what AT_DISPATCH_FLOATING_TYPES instantiates, defined by the device unit
        inst = f"template void musaenv_launch_add_kernel<{t}>(dim3, dim3, size_t, cudaStream_t, const {t}* a,"
        assert inst in s.device
    assert "Half" not in s.device and "<<<" not in s.host


def test_a_template_kernel_launched_with_a_builtin_type_is_instantiated_for_that_type_only():
    src = (
        KB_TEMPLATE.replace('AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "add_cuda", ([&] {', "{")
        .replace("}));", "}")
        .replace("<scalar_t>", "<float>")
    )
    s = _split(src)
    assert s is not None and "musaenv_launch_add_kernel<float>(dim3" in s.device
    assert "<double>" not in s.device


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("AT_DISPATCH_FLOATING_TYPES(", "AT_DISPATCH_FLOATING_TYPES_AND_HALF("),  # c10::Half: a torch type
        ("add_kernel<scalar_t><<<", "add_kernel<<<"),  # template arguments left to deduction
        ("template <typename scalar_t>", "template <typename scalar_t, int N>"),  # N given no argument
        ("add_kernel<scalar_t><<<", "add_kernel<scalar_t*><<<"),  # a type spelled other than one type
    ],
)
def test_template_kernels_the_split_cannot_spell_for_certain_are_built_as_written(old, new):
    assert old in KB_TEMPLATE
    assert _split(KB_TEMPLATE.replace(old, new)) is None


@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_the_device_preludes_standard_headers_are_ones_the_unsplit_unit_includes(tmp_path):
    """The device unit may add only headers the unsplit unit sees (so nothing builds split that would not as
    written): every standard header of DEVICE_PRELUDE is among the dependencies nvcc lists for cuda.cu's prelude."""
    import subprocess

    from torch.utils.cpp_extension import include_paths

    from musaenv.toolchains.cuda.split import DEVICE_PRELUDE

    unit = tmp_path / "cuda.cu"
    unit.write_text("\n".join([*_CUDA_PRELUDE, "__global__ void k() {}", ""]))
    nvcc = str(_env.cuda_home() / "bin" / "nvcc")
    cmd = [nvcc, "-std=c++17", *(f"-I{p}" for p in include_paths()), "-M", str(unit)]
    deps = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert deps.returncode == 0, deps.stderr[-2000:]
    files = {p.rsplit("/", 1)[-1] for p in deps.stdout.split()}
    std = [m for line in DEVICE_PRELUDE for m in re.findall(r"<(\w+)>", line) if not m.startswith("cuda")]
    assert "cassert" in std and set(std) <= files, sorted(set(std) - files)
