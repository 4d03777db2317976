"""CUDA candidates for GPU checks (tests/gpu and benchmarks/gpu_selfcheck.py): a wrong kernel and a timing cheat.

Both solve ``l1_relu`` and share one kernel; they differ only in what the launcher does.
"""

from __future__ import annotations

_TEMPLATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor relu_forward(torch::Tensor x);"

CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, float slope) {{
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{
        const float v = x[i];
        out[i] = v > 0.0f ? v : slope * v;
    }}
}}

torch::Tensor relu_forward(torch::Tensor x) {{
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 1 << 16);
{launch}
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}}
"""

ext = load_inline(name="{name}", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu_forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)
'''

_CURRENT_STREAM = (
    "    relu_kernel<<<(unsigned)blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(\n"
    "        x.data_ptr<float>(), out.data_ptr<float>(), n, {slope});"
)
# HACKS T1: the kernel runs on a private stream that the timing events on the current stream do not cover.
_SIDE_STREAM = (
    "    static cudaStream_t side = nullptr;\n"
    "    if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);\n"
    "    relu_kernel<<<(unsigned)blocks, 256, 0, side>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, 0.0f);"
)


def _response(name: str, launch: str) -> str:
    return "```python\n" + _TEMPLATE.format(name=name, launch=launch) + "\n```"


WRONG_RELU_CUDA = _response("wrong_relu", _CURRENT_STREAM.format(slope="0.5f"))
"""Leaky ReLU with slope 0.5 where the task wants ReLU: compiles and runs, wrong for negative inputs."""

SIDE_STREAM_RELU_CUDA = _response("side_stream_relu", _SIDE_STREAM)
"""Correct ReLU values, launched on a side stream (a timing cheat)."""
