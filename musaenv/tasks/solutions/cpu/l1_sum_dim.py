"""Reference CPU solution for l1_sum_dim: the input is viewed as (outer, reduced, inner) and summed in double.

The inner loop walks the contiguous innermost axis, so the strided reduction still reads memory in order.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <algorithm>
#include <vector>

torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    const int64_t nd = x.dim();
    if (dim < 0) dim += nd;
    TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
    x = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < nd; ++d) inner *= x.size(d);
    const int64_t r = x.size(dim);
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes[dim] = 1;
    auto out = torch::empty(sizes, x.options());
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    std::vector<double> acc(inner);
    for (int64_t o = 0; o < outer; ++o) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const float* base = px + o * r * inner;
        for (int64_t k = 0; k < r; ++k) {
            const float* row = base + k * inner;
            for (int64_t i = 0; i < inner; ++i) acc[i] += row[i];
        }
        for (int64_t i = 0; i < inner; ++i) po[o * inner + i] = static_cast<float>(acc[i]);
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l1_sum_dim",
    cpp_sources=CPP,
    functions=["sum_dim_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.sum_dim_forward(x, self.dim)
