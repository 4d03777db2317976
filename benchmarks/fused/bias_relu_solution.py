"""Honest fused solution of bias_relu.py: one pass, one output."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <algorithm>

torch::Tensor bias_relu(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) {
        po[i] = std::max(px[i] + 1.0f, 0.0f);
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_bench_bias_relu",
    cpp_sources=CPP,
    functions=["bias_relu"],
    extra_cflags=["-O3", "-ffast-math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.bias_relu(x)
