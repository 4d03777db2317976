"""Reference CPU solution for l1_rmsnorm: mean of squares in double per row, one reciprocal per row."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor rmsnorm_forward(torch::Tensor x, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    const int64_t h = x.size(-1);
    const int64_t rows = x.numel() / h;
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* src = px + r * h;
        float* dst = po + r * h;
        double ss = 0.0;
        for (int64_t i = 0; i < h; ++i) ss += static_cast<double>(src[i]) * src[i];
        const double inv = 1.0 / std::sqrt(ss / h + eps);
        for (int64_t i = 0; i < h; ++i) dst[i] = static_cast<float>(src[i] * inv);
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l1_rmsnorm",
    cpp_sources=CPP,
    functions=["rmsnorm_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.rmsnorm_forward(x, self.eps)
