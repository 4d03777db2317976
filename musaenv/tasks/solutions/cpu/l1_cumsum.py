"""Reference CPU solution for l1_cumsum: a sequential scan per row with a double running sum."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>

torch::Tensor cumsum_rows_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    TORCH_CHECK(x.dim() == 2, "a 2-D input expected");
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        double run = 0.0;
        const float* src = px + r * cols;
        float* dst = po + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
            run += src[c];
            dst[c] = static_cast<float>(run);
        }
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l1_cumsum",
    cpp_sources=CPP,
    functions=["cumsum_rows_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.cumsum_rows_forward(x)
