"""B4: aten::relu reached through the dispatcher's redispatch, below the keys the profiler and dispatch modes see."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <ATen/core/dispatch/Dispatcher.h>
torch::Tensor relu_fwd(torch::Tensor x) {
    static auto op = c10::Dispatcher::singleton()
        .findSchemaOrThrow("aten::relu", "")
        .typed<at::Tensor(const at::Tensor&)>();
    return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), x);
}
"""

ext = load_inline(name="musaenv_adv_b04", cpp_sources=SRC, functions=["relu_fwd"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x)
