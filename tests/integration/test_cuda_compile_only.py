"""CUDA candidates on a machine with nvcc but no GPU: compiled for real through the evaluator, never run."""

from __future__ import annotations

import pytest

from musaenv import _env
from musaenv.config import EvalConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.types import Stage

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc (CUDA_HOME or /usr/local/cuda)"),
]

# An undefined identifier inside a __global__ kernel: nvcc's front end rejects it with a fixed wording.
SYNTAX_ERROR = '''```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor relu_forward(torch::Tensor x);"
CUDA = r"""
#include <c10/cuda/CUDAStream.h>
__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], musaenv_undefined_symbol);
}
torch::Tensor relu_forward(torch::Tensor x) {
    auto out = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
"""
ext = load_inline(name="broken_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)
```'''


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator("cuda", EvalConfig())
    if not ev.backend.compile_only:
        ev.close()
        pytest.skip("a CUDA GPU is visible: the compile-only path is not taken (see tests/gpu)")
    yield ev
    ev.close()


def test_correct_cuda_solution_is_compiled_not_run(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), solution_source("l1_relu", "cuda"), seed=1)
    assert r.stage is Stage.COMPILED, r.to_dict()
    assert any("correctness and timing were not run" in m for m in r.messages)
    assert r.trials_total == 0 and r.speedup is None and r.runtime_ms is None


def test_cuda_syntax_error_carries_nvcc_message(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), SYNTAX_ERROR, seed=2)
    assert r.stage is Stage.COMPILE_ERROR, r.to_dict()
    # nvcc's own diagnostic, verbatim (EDG front-end wording), with the line it points at.
    assert 'error: identifier "musaenv_undefined_symbol" is undefined' in r.compiler_log
    assert "fmaxf(x[i], musaenv_undefined_symbol)" in r.compiler_log
