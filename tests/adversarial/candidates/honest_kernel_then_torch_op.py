"""Honest under the kernelbench policy: a kernel computes the linear layer (x W^T + b) and torch applies the ReLU to
the kernel's result (``y = kernel(x); return torch.relu(y)``, a vendor-style epilogue KernelBench lets stay in
PyTorch). The output is what a torch op computed, but from the kernel's values, not from forward's input:
``torch_computed_output`` must not refuse it, and the kernel takes nearly all of the compute time."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
torch::Tensor affine(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    x = x.contiguous(); w = w.contiguous(); b = b.contiguous();
    const int64_t rows = x.size(0), inner = x.size(1), cols = w.size(0);
    auto out = torch::empty({rows, cols}, x.options());
    const float* px = x.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            float acc = pb[j];
            for (int64_t k = 0; k < inner; ++k) acc += px[i * inner + k] * pw[j * inner + k];
            po[i * cols + j] = acc;
        }
    return out;
}
"""

ext = load_inline(name="musaenv_adv_honest_then_torch", cpp_sources=SRC, functions=["affine"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(ext.affine(x, self.fc.weight, self.fc.bias))
