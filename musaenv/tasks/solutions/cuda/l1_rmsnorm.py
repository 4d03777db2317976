"""Reference CUDA solution for l1_rmsnorm:
RMS norm per row (one block per row): sum of squares, then x / sqrt(mean + eps).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
torch::Tensor rmsnorm_forward(torch::Tensor x, double eps);
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

__global__ void rmsnorm_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols, float eps) {
    __shared__ float shared[32];
    const int64_t base = (int64_t)blockIdx.x * cols;
    float q = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = x[base + c];
        q += v * v;
    }
    const float inv = 1.0f / sqrtf(block_reduce<false>(q, shared) / (float)cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[base + c] = x[base + c] * inv;
}

static int row_threads(int64_t cols) {
    // One block per row: 1024 threads for long rows, fewer for short ones (a multiple of the warp size).
    int t = 32;
    while (t < 1024 && t < cols) t *= 2;
    return t;
}

torch::Tensor rmsnorm_forward(torch::Tensor x, double eps) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    auto out = torch::empty_like(x);
    if (rows == 0) return out;
    TORCH_CHECK(rows <= 0x7fffffffLL, "too many rows for one grid dimension");
    rmsnorm_kernel<<<(unsigned)rows, row_threads(cols), 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), cols, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(
    name="musaenv_cuda_l1_rmsnorm",
    cpp_sources=CPP,
    cuda_sources=CUDA,
    functions=["rmsnorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = float(eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.rmsnorm_forward(x, self.eps)
