"""S4 under the kernelbench policy: torch.softmax does the task, the "kernel" only copies its result (memcpy).

Everything KernelBench's checker looks for is there (an extension, a call of it on every forward, no try/except),
and the output is correct. Refused under ``kernelbench`` by ``low_kernel_coverage``: the copy's time is a small
share of forward's compute next to the softmax's.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <cstring>
torch::Tensor copy_rows(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    std::memcpy(out.data_ptr<float>(), x.data_ptr<float>(), sizeof(float) * x.numel());
    return out;
}
"""

ext = load_inline(
    name="musaenv_adv_softmax_copy", cpp_sources=SRC, functions=["copy_rows"], extra_cflags=["-O2"]
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.copy_rows(torch.softmax(x, dim=1))
