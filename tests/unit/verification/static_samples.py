"""Honest candidates (one per backend flavour) and builders of small cheating ones, shared by the static tests."""

from __future__ import annotations

import textwrap

HONEST_CPU = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <omp.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous, unlike at::relu inputs");  // at::relu in a comment
    auto out = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t n = x.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        dst[i] = src[i] > 0.f ? src[i] : 0.f;
    }
    return out;
}
"""

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources=cpp_source,
    functions=["relu_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-lgomp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x.contiguous())
'''

HONEST_CUDA = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define TILE 16

__global__ void linear_relu_kernel(const float* __restrict__ a, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ out, int M, int N, int K) {
    __shared__ float as[TILE][TILE];
    __shared__ float ws[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x;
        int kw = t * TILE + threadIdx.y;
        as[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? a[row * K + ka] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (col < N && kw < K) ? w[col * K + kw] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < TILE; ++i) acc += as[threadIdx.y][i] * ws[i][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) out[row * N + col] = fmaxf(acc + b[col], 0.0f);
}

torch::Tensor linear_relu(torch::Tensor a, torch::Tensor w, torch::Tensor b) {
    CHECK_CUDA(a); CHECK_CUDA(w);
    const at::cuda::OptionalCUDAGuard guard(device_of(a));
    const int M = a.size(0), K = a.size(1), N = w.size(0);
    auto out = torch::empty({M, N}, a.options().dtype(torch::kFloat32));
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    auto stream = at::cuda::getCurrentCUDAStream();
    linear_relu_kernel<<<grid, block, 0, stream>>>(
        a.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor linear_relu(torch::Tensor a, torch::Tensor w, torch::Tensor b);"

fused = load_inline(
    name="fused_linear_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["linear_relu"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.fused = fused

    def forward(self, x):
        x = x.contiguous()
        batch = x.shape[0]
        assert x.dim() == 2 and batch > 0 and x.dtype == torch.float32
        return self.fused.linear_relu(x, self.linear.weight, self.linear.bias)
'''

HONEST_TRITON = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4)], key=["n"])
@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + y, mask=mask)


def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    scale_add_kernel[grid](x, y, out, n, alpha)
    return out


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 2.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        shape = x.shape
        x = x.contiguous().view(-1)
        y = y.contiguous().view(-1)
        out = scale_add(x, y, self.alpha)
        return out.view(shape)
"""

HONEST_MUSA = '''
import torch
import torch_musa
import torch.nn as nn
from torch_musa.utils.musa_extension import load_inline

musa_source = r"""
#include <torch/extension.h>
#include <musa_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor add_musa(torch::Tensor a, torch::Tensor b) {
    const c10::musa::OptionalMUSAGuard guard(device_of(a));
    auto out = torch::empty_like(a);
    int64_t n = a.numel();
    musaStream_t stream = c10::musa::getCurrentMUSAStream();
    add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                    out.data_ptr<float>(), n);
    C10_MUSA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(
    name="add_musa",
    cpp_sources="torch::Tensor add_musa(torch::Tensor a, torch::Tensor b);",
    musa_sources=musa_source,
    functions=["add_musa"],
)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_musa(a, b)
'''

_HEAD = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
{cpp}
"""
ext = load_inline(name="e", cpp_sources=SRC, functions=["k"]{kwargs})
'''

_OK_CPP = "torch::Tensor k(torch::Tensor x) { auto y = torch::empty_like(x); return y; }"

_FORWARD = """
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.k(x)
"""


def candidate(body: str = _FORWARD, cpp: str = _OK_CPP, kwargs: str = "") -> str:
    """A candidate: an extension ``ext`` with function ``k`` built from ``cpp``, then ``body`` (dedented).

    The default ``body`` is an honest ``ModelNew`` whose forward returns ``ext.k(x)``.
    """
    return _HEAD.format(cpp=cpp, kwargs=kwargs) + textwrap.dedent(body)


def with_forward(forward_body: str, prelude: str = "", params: str = "x") -> str:
    """A candidate whose ``ModelNew.forward(self, <params>)`` runs ``forward_body`` (dedented, indented here)."""
    body = textwrap.indent(textwrap.dedent(forward_body).strip(), " " * 8)
    model = f"class ModelNew(nn.Module):\n    def forward(self, {params}):\n{body}\n"
    return candidate(textwrap.dedent(prelude) + "\n" + model)


def line_of(source: str, needle: str) -> int:
    """1-based line of the first line of ``source`` containing ``needle``."""
    return next(i for i, ln in enumerate(source.splitlines(), 1) if needle in ln)
