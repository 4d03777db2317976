"""Reference CUDA solution for l2_bias_softmax:
softmax(x + bias) per row, the add fused into every pass; one block per row.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
torch::Tensor bias_softmax_forward(torch::Tensor x, torch::Tensor bias);
"""

CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

// Block-wide reductions: warp shuffles, then one value per warp through shared memory.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <bool IsMax>
__device__ float block_reduce(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    const float identity = IsMax ? -INFINITY : 0.0f;
    v = IsMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < warps ? shared[threadIdx.x] : identity;
    if (warp == 0) v = IsMax ? warp_max(v) : warp_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    const float result = shared[0];
    __syncthreads();  // shared may be reused by the next reduction
    return result;
}

__global__ void bias_softmax_kernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out, int64_t cols) {
    __shared__ float shared[32];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    float* outr = out + row * cols;
    // Three passes over the row: max, sum of exp(v - max), write. The max is subtracted before exp.
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, (xr[c] + bias[c]));
    m = block_reduce<true>(m, shared);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf((xr[c] + bias[c]) - m);
    s = block_reduce<false>(s, shared);
    const float inv = 1.0f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) outr[c] = expf(xr[c] + bias[c] - m) * inv;
}

static int row_threads(int64_t cols) {
    // One block per row: 1024 threads for long rows, fewer for short ones (a multiple of the warp size).
    int t = 32;
    while (t < 1024 && t < cols) t *= 2;
    return t;
}

torch::Tensor bias_softmax_forward(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(bias.is_cuda(), "bias must be a CUDA tensor");
    TORCH_CHECK(bias.scalar_type() == torch::kFloat32, "bias must be float32");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    bias = bias.contiguous();
    TORCH_CHECK(bias.numel() == x.size(-1), "bias must have one value per column");
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    auto out = torch::empty_like(x);
    if (rows == 0) return out;
    TORCH_CHECK(rows <= 0x7fffffffLL, "too many rows for one grid dimension");
    bias_softmax_kernel<<<(unsigned)rows, row_threads(cols), 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(
    name="musaenv_cuda_l2_bias_softmax",
    cpp_sources=CPP,
    cuda_sources=CUDA,
    functions=["bias_softmax_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # Same parameter, created the same way as the reference, so seeded construction matches it.
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.bias_softmax_forward(x, self.bias)
