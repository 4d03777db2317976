"""Reference CUDA solution for l1_sum_dim: sum over any one dimension (keepdim), one thread per output."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim);
"""

CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <vector>

// The input is viewed as (outer, R, inner) around the reduced dimension. One thread per output element;
// consecutive threads take consecutive inner indices, so every step of the loop over R is a coalesced load.
__global__ void sum_dim_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t outer, int64_t R,
                           int64_t inner, float scale) {
    const int64_t total = outer * inner;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int64_t o = idx / inner, i = idx - o * inner;
        const float* p = x + o * R * inner + i;
        float acc = 0.0f;
        for (int64_t r = 0; r < R; ++r) acc += p[r * inner];
        out[idx] = acc * scale;
    }
}

torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    const int64_t nd = x.dim();
    TORCH_CHECK(nd > 0, "x must have at least one dimension");
    const int64_t d = ((dim % nd) + nd) % nd;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
    for (int64_t i = d + 1; i < nd; ++i) inner *= x.size(i);
    const int64_t R = x.size(d);
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape[d] = 1;
    auto out = torch::empty(shape, x.options());
    const int64_t total = outer * inner;
    if (total == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 1 << 16);
    sum_dim_kernel<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), outer, R, inner, 1.0f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(
    name="musaenv_cuda_l1_sum_dim",
    cpp_sources=CPP,
    cuda_sources=CUDA,
    functions=["sum_dim_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.sum_dim_forward(x, self.dim)
