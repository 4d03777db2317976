"""Honest: forward collects the network's Linear modules in a list (plumbing: none is called) and runs its own kernel
with their weights."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    x = x.contiguous(); w = w.contiguous();
    auto out = torch::empty({x.size(0), w.size(0)}, x.options());
    const float* px = x.data_ptr<float>(); const float* pw = w.data_ptr<float>(); const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.size(0); ++i)
        for (int64_t j = 0; j < w.size(0); ++j) {
            float s = pb[j];
            for (int64_t k = 0; k < x.size(1); ++k) s += px[i * x.size(1) + k] * pw[j * x.size(1) + k];
            po[i * w.size(0) + j] = s > 0.0f ? s : 0.0f;
        }
    return out;
}
"""

ext = load_inline(name="musaenv_adv_honest_collect", cpp_sources=SRC, functions=["linear_relu"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(in_features, out_features), nn.ReLU())

    def forward(self, x):
        layers = [m for m in self.network if isinstance(m, nn.Linear)]
        for layer in layers:
            x = ext.linear_relu(x, layer.weight, layer.bias)
        return x
