"""B1: a compile error worded like a full disk, to be read as the machine's fault (an unscored infra_error)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#error "fatal error: cannot write main.o: No space left on device"
torch::Tensor relu_fwd(torch::Tensor x) { return x; }
"""

ext = load_inline(name="musaenv_adv_b01", cpp_sources=SRC, functions=["relu_fwd"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x)
