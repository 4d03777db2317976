"""Candidates for integration tests, all sharing ONE C++ source so the suite compiles it once.

Each candidate's forward calls a different function of the same extension: a correct ReLU, a wrong one, one
that throws, one that segfaults, one that never returns.
"""

from __future__ import annotations

HAZARD_CPP = r"""
#include <torch/extension.h>
#include <stdexcept>

static torch::Tensor relu_impl(torch::Tensor x, float neg_slope) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0.0f ? px[i] : neg_slope * px[i];
    return out;
}
torch::Tensor relu_ok(torch::Tensor x) { return relu_impl(x, 0.0f); }
torch::Tensor relu_wrong(torch::Tensor x) { return relu_impl(x, 0.5f); }
torch::Tensor throws(torch::Tensor x) { throw std::runtime_error("kernel exploded on purpose"); }
torch::Tensor segfault(torch::Tensor x) { *(volatile int*)16 = 1; return x; }
torch::Tensor spin(torch::Tensor x) { volatile long i = 0; for (;;) { i = i + 1; } return x; }
"""

_TEMPLATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{cpp}"""

ext = load_inline(name="hazards", cpp_sources=CPP,
                  functions=["relu_ok", "relu_wrong", "throws", "segfault", "spin"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self{init_args}):
        super().__init__()

    def forward(self, x):
        return ext.{fn}(x)
'''


def hazard_candidate(fn: str, init_args: str = "") -> str:
    """A ReLU-task candidate whose forward calls ``fn`` of the shared extension, wrapped as an LLM response."""
    code = _TEMPLATE.format(cpp=HAZARD_CPP, fn=fn, init_args=init_args)
    return f"Here is my kernel:\n```python\n{code}\n```\n"


COMPILE_ERROR_CANDIDATE = """```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="broken", cpp_sources="int f( { return 1 }", functions=None)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
```"""
