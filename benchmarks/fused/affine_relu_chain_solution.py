"""Honest fused solution of affine_relu_chain.py: the five ops in one pass, one output."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <algorithm>

torch::Tensor affine_relu_chain(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = px[i];
        po[i] = std::max(v * 2.0f + 1.0f, 0.0f) * 0.5f - 0.25f + v;
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_bench_affine_relu_chain",
    cpp_sources=CPP,
    functions=["affine_relu_chain"],
    extra_cflags=["-O3", "-ffast-math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.affine_relu_chain(x)
