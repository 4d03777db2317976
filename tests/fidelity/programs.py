"""KernelBench-style programs written the way models write them, for the fidelity tests.

Kernel sources are shared between programs on purpose: musaenv's build cache and torch's own extension cache then
build each source once, so the set stays cheap although every program is checked against torch itself.
"""

from __future__ import annotations

# --- references (KernelBench format) ----------------------------------------------------------------------------

RELU_REF = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


N = 4096


def get_inputs():
    return [torch.randn(N){cuda}]


def get_init_inputs():
    return []
"""

MLP_REF = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return [[32, 64, 16]]
"""

# get_inputs fails: a compile-only evaluation must never call it, every other evaluation blames the task.
UNDRAWABLE_REF = RELU_REF.replace("    return [torch.randn(N){cuda}]", '    raise RuntimeError("inputs drawn")')

# --- C++ sources --------------------------------------------------------------------------------------------------

RELU_CPP = r"""
torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = p[i] > 0.f ? p[i] : 0.f;
    return out;
}
"""

LINEAR_CPP = r"""
torch::Tensor linear_act(torch::Tensor x, torch::Tensor w, torch::Tensor b, bool relu) {
    auto xc = x.contiguous(), wc = w.contiguous(), bc = b.contiguous();
    int64_t n = xc.size(0), k = xc.size(1), m = wc.size(0);
    auto out = torch::empty({n, m}, xc.options());
    const float *px = xc.data_ptr<float>(), *pw = wc.data_ptr<float>(), *pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
            float acc = pb[j];
            for (int64_t t = 0; t < k; ++t) acc += px[i * k + t] * pw[j * k + t];
            po[i * m + j] = relu && acc < 0.f ? 0.f : acc;
        }
    return out;
}
"""

# A bound function declared and never defined (the backward a model meant to write): it compiles, and the import
# fails with `undefined symbol`.
DECLARED_ONLY_CPP = RELU_CPP + "torch::Tensor relu_backward(torch::Tensor grad);\n"
# In cpp_sources beside CUDA sources: the declaration promises a C symbol, the .cu defines a C++ (mangled) one.
EXTERN_C_DECL = 'extern "C" torch::Tensor relu_forward(torch::Tensor x);'
RELU_DECL = "torch::Tensor relu_forward(torch::Tensor x);"

# --- CUDA source --------------------------------------------------------------------------------------------------

RELU_CU = r"""
#include <c10/cuda/CUDAStream.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

_HEAD = """import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

"""


def module_level(cpp: str, cuda: str | None, functions: str, extra: str = "") -> str:
    """``ext = load_inline(...)`` at module level, the way most generations build (``extra``: more keywords)."""
    cuda_arg = f", cuda_sources={cuda!r}" if cuda is not None else ""
    return f'ext = load_inline(name="fid_ext", cpp_sources={cpp!r}{cuda_arg}, functions={functions}{extra})\n\n\n'


RELU_FORWARD = """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_forward(x)
"""


def relu_program(cpp: str, cuda: str | None = None, extra: str = "") -> str:
    """A one-kernel ReLU program."""
    return _HEAD + module_level(cpp, cuda, '["relu_forward"]', extra) + RELU_FORWARD


def container_relu_program(cpp: str, cuda: str | None = None) -> str:
    """The kernel is reached only through modules ModelNew holds: a ModuleList of blocks holding a layer."""
    return (
        _HEAD
        + module_level(cpp, cuda, '["relu_forward"]')
        + """class Act(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = Act()

    def forward(self, x):
        return self.act(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(2)])
        self.tail = nn.Sequential(Act())

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.tail(x)
"""
    )


def lazy_relu_program(cpp: str, cuda: str | None = None) -> str:
    """The extension is built on the first forward call only (no module-level or constructor build)."""
    cuda_arg = f", cuda_sources={cuda!r}" if cuda is not None else ""
    return (
        _HEAD
        + f"""class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = None

    def forward(self, x):
        if self.ext is None:
            self.ext = load_inline(name="fid_ext", cpp_sources={cpp!r}{cuda_arg}, functions=["relu_forward"])
        return self.ext.relu_forward(x)
"""
    )


def partial_rewrite_program(cpp: str, cuda: str) -> str:
    """One operator replaced (ReLU), another kept in PyTorch (clamp): KernelBench allows it, strict does not."""
    return (
        _HEAD
        + module_level(cpp, cuda, '["relu_forward"]')
        + """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.clamp(x, min=-3.0e38)  # kept in PyTorch
        return ext.relu_forward(y)
"""
    )


def mlp_program() -> str:
    """An honest MLP kernel: forward walks its Sequential, picks the Linear layers with isinstance and reads their
    parameters (plumbing), and computes every layer with the extension."""
    return (
        _HEAD
        + module_level(LINEAR_CPP, None, '["linear_act"]')
        + """class ModelNew(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.network = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.network:
            if isinstance(m, nn.Linear):
                x = ext.linear_act(x, m.weight, m.bias, True)
        return x
"""
    )
