"""Honest: the kernel is a method of a py::class_ object the extension defines (counted as a kernel call)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
struct Relu {
    torch::Tensor forward(torch::Tensor x) {
        x = x.contiguous();
        auto out = torch::empty_like(x);
        const float* a = x.data_ptr<float>();
        float* b = out.data_ptr<float>();
        for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] > 0.0f ? a[i] : 0.0f;
        return out;
    }
};
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    py::class_<Relu>(m, "Relu").def(py::init<>()).def("forward", &Relu::forward);
}
"""

ext = load_inline(name="musaenv_adv_honest_class", cpp_sources=SRC, extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = ext.Relu()

    def forward(self, x):
        return self.kernel.forward(x)
