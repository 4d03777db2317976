"""S4 bought past the kernel-coverage floor: torch.softmax does the task; the "kernel" passes its result through a
chain of twelve buffer-to-buffer copies, busy work that only exists to take up time.

Twelve dependent copies of the answer cost far more than the softmax itself, so the kernels' share of the compute
time reads above the floor (0.986 measured before this rule) and ``low_kernel_coverage`` stays silent; the copies cost
speed, which costs nothing under MusaCoder's score. Refused under ``kernelbench`` by ``torch_computed_output``: the
output is the value ``aten::_softmax`` computed from forward's input, whatever the kernel did with it on the way out.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <cstdint>

// The answer handed along a chain of buffers: each pass reads what the previous one wrote.
torch::Tensor relay(torch::Tensor answer, int64_t passes) {
    answer = answer.contiguous();
    const int64_t n = answer.numel();
    auto a = torch::empty_like(answer);
    auto b = torch::empty_like(answer);
    const float* src = answer.data_ptr<float>();
    float* pa = a.data_ptr<float>();
    float* pb = b.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) pa[i] = src[i];
    for (int64_t p = 1; p < passes; ++p) {
        for (int64_t i = 0; i < n; ++i) pb[i] = pa[i];
        float* t = pa; pa = pb; pb = t;
    }
    return pa == a.data_ptr<float>() ? a : b;
}
"""

ext = load_inline(name="musaenv_adv_softmax_relay", cpp_sources=SRC, functions=["relay"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relay(torch.softmax(x, dim=1), 12)
