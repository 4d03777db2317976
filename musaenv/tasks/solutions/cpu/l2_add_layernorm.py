"""Reference CPU solution for l2_add_layernorm: the residual add is fused into the layer norm's row passes."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>

torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                                    torch::Tensor bias, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual must have the same shape");
    x = x.contiguous();
    residual = residual.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t h = x.size(-1);
    TORCH_CHECK(weight.numel() == h && bias.numel() == h, "weight/bias must match the last dimension");
    const int64_t rows = x.numel() / h;
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    const float* pr = residual.data_ptr<float>();
    const float* pw = weight.data_ptr<float>();
    const float* pb = bias.data_ptr<float>();
    float* po = out.data_ptr<float>();
    std::vector<float> v(h);
    for (int64_t r = 0; r < rows; ++r) {
        const float* xs = px + r * h;
        const float* rs = pr + r * h;
        float* dst = po + r * h;
        double s = 0.0;
        for (int64_t i = 0; i < h; ++i) {
            v[i] = xs[i] + rs[i];  // rounded to fp32 like the reference's x + residual
            s += v[i];
        }
        const double mean = s / h;
        double ss = 0.0;
        for (int64_t i = 0; i < h; ++i) {
            const double d = v[i] - mean;
            ss += d * d;
        }
        const double rstd = 1.0 / std::sqrt(ss / h + eps);
        for (int64_t i = 0; i < h; ++i) dst[i] = static_cast<float>((v[i] - mean) * rstd * pw[i] + pb[i]);
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l2_add_layernorm",
    cpp_sources=CPP,
    functions=["add_layernorm_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden_size)
        with torch.no_grad():  # the reference's seeded scale and shift, drawn in the same order
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return ext.add_layernorm_forward(x, residual, self.ln.weight, self.ln.bias, self.ln.eps)
