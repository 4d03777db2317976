"""Reference CUDA solution for l2_add_layernorm:
layer_norm(x + residual), the add fused into every pass; one block per row.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, torch::Tensor bias, double eps);
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

__global__ void add_layernorm_kernel(const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ out, int64_t cols, float eps) {
    __shared__ float shared[32];
    const int64_t base = (int64_t)blockIdx.x * cols;
    // Two-pass statistics (mean, then squared deviations) avoid the cancellation of E[v^2] - E[v]^2.
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += (x[base + c] + r[base + c]);
    const float mean = block_reduce<false>(s, shared) / (float)cols;
    float q = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = (x[base + c] + r[base + c]) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_reduce<false>(q, shared) / (float)cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[base + c] = ((x[base + c] + r[base + c]) - mean) * rstd * w[c] + b[c];
}

static int row_threads(int64_t cols) {
    // One block per row: 1024 threads for long rows, fewer for short ones (a multiple of the warp size).
    int t = 32;
    while (t < 1024 && t < cols) t *= 2;
    return t;
}

torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(residual.is_cuda(), "residual must be a CUDA tensor");
    TORCH_CHECK(residual.scalar_type() == torch::kFloat32, "residual must be float32");
    TORCH_CHECK(weight.is_cuda(), "weight must be a CUDA tensor");
    TORCH_CHECK(weight.scalar_type() == torch::kFloat32, "weight must be float32");
    TORCH_CHECK(bias.is_cuda(), "bias must be a CUDA tensor");
    TORCH_CHECK(bias.scalar_type() == torch::kFloat32, "bias must be float32");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    residual = residual.contiguous();
    TORCH_CHECK(residual.sizes() == x.sizes(), "residual must match x");
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    auto out = torch::empty_like(x);
    if (rows == 0) return out;
    TORCH_CHECK(rows <= 0x7fffffffLL, "too many rows for one grid dimension");
    add_layernorm_kernel<<<(unsigned)rows, row_threads(cols), 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), residual.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), cols, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(
    name="musaenv_cuda_l2_add_layernorm",
    cpp_sources=CPP,
    cuda_sources=CUDA,
    functions=["add_layernorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        # Same module as the reference so that seeded construction gives the same parameters.
        self.ln = nn.LayerNorm(hidden_size)
        with torch.no_grad():  # the reference's seeded scale and shift, drawn in the same order
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return ext.add_layernorm_forward(x, residual, self.ln.weight, self.ln.bias, self.ln.eps)
