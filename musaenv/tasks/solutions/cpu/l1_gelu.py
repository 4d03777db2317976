"""Reference CPU solution for l1_gelu: exact GELU 0.5 x (1 + erf(x / sqrt(2))), evaluated in double."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = x.numel();
    const double inv_sqrt2 = 0.70710678118654752440;
    for (int64_t i = 0; i < n; ++i) {
        const double v = px[i];
        po[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * inv_sqrt2)));
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l1_gelu",
    cpp_sources=CPP,
    functions=["gelu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.gelu_forward(x)
