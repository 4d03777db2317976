"""Honest under the kernelbench policy: two kernels compute the softmax; torch only takes the reciprocal of the row
sums, one number per row (a small op KernelBench lets stay in PyTorch). Correct under ``kernelbench``, with a kernel
coverage far above the floor."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <cmath>
// exp(x - row max) into a new tensor; the row sums into `sums` (one per row)
torch::Tensor exp_rows(torch::Tensor x, torch::Tensor sums) {
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    float* ps = sums.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float mx = px[r * cols];
        for (int64_t c = 1; c < cols; ++c) mx = px[r * cols + c] > mx ? px[r * cols + c] : mx;
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            const float e = std::exp(px[r * cols + c] - mx);
            po[r * cols + c] = e;
            sum += e;
        }
        ps[r] = static_cast<float>(sum);
    }
    return out;
}
// each row scaled in place by its factor
torch::Tensor scale_rows(torch::Tensor e, torch::Tensor factors) {
    const int64_t rows = e.size(0), cols = e.size(1);
    float* pe = e.data_ptr<float>();
    const float* pf = factors.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) pe[r * cols + c] *= pf[r];
    return e;
}
"""

ext = load_inline(
    name="musaenv_adv_softmax_two_kernels",
    cpp_sources=SRC,
    functions=["exp_rows", "scale_rows"],
    extra_cflags=["-O2"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        sums = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        e = ext.exp_rows(x, sums)
        return ext.scale_rows(e, torch.reciprocal(sums))
