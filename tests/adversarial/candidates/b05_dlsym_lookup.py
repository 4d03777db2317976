"""B5: a torch function looked up by its mangled name at run time (dlsym), so no source names it."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <dlfcn.h>
torch::Tensor relu_fwd(torch::Tensor x) {
    using Fn = at::Tensor (*)(const at::Tensor&);
    static const char parts[][16] = {"_ZN2at4_ops", "4relu4call", "ERKNS_6TensorE"};
    std::string name = std::string(parts[0]) + parts[1] + parts[2];
    auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name.c_str()));
    return fn(x);
}
"""

ext = load_inline(name="musaenv_adv_b05", cpp_sources=SRC, functions=["relu_fwd"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x)
