"""Reference CPU solution for l1_layernorm: two-pass mean and biased variance in double per row, then the affine."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t h = x.size(-1);
    TORCH_CHECK(weight.numel() == h && bias.numel() == h, "weight/bias must match the last dimension");
    const int64_t rows = x.numel() / h;
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    const float* pw = weight.data_ptr<float>();
    const float* pb = bias.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* src = px + r * h;
        float* dst = po + r * h;
        double s = 0.0;
        for (int64_t i = 0; i < h; ++i) s += src[i];
        const double mean = s / h;
        double ss = 0.0;
        for (int64_t i = 0; i < h; ++i) {
            const double d = src[i] - mean;
            ss += d * d;
        }
        const double rstd = 1.0 / std::sqrt(ss / h + eps);
        for (int64_t i = 0; i < h; ++i) {
            dst[i] = static_cast<float>((src[i] - mean) * rstd * pw[i] + pb[i]);
        }
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l1_layernorm",
    cpp_sources=CPP,
    functions=["layernorm_forward"],
    extra_cflags=["-O3"],
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.layernorm_forward(x, self.ln.weight, self.ln.bias, self.ln.eps)
