"""Honest: the kernel is looked up on the candidate's own extension module by a computed name."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
torch::Tensor relu_launch(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    float* b = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] > 0.0f ? a[i] : 0.0f;
    return out;
}
"""

ext = load_inline(name="musaenv_adv_honest_getattr", cpp_sources=SRC, functions=["relu_launch"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self, op="relu"):
        super().__init__()
        self.op = op

    def forward(self, x):
        fn = getattr(ext, f"{self.op}_launch")
        return fn(x)
