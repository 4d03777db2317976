"""Reference CPU solution for l1_softmax: per row max, then exp(x - max) summed in double, then a scale."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor softmax_rows_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    TORCH_CHECK(x.dim() == 2, "a 2-D input expected");
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* src = px + r * cols;
        float* dst = po + r * cols;
        float mx = src[0];
        for (int64_t c = 1; c < cols; ++c) mx = src[c] > mx ? src[c] : mx;
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            const float e = std::exp(src[c] - mx);  // max subtraction: never overflows
            dst[c] = e;
            sum += e;
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t c = 0; c < cols; ++c) dst[c] *= inv;
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l1_softmax",
    cpp_sources=CPP,
    functions=["softmax_rows_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.softmax_rows_forward(x)
