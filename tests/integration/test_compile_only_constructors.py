"""Compile-only constructors judged as KernelBench judges them: the candidate's own exception is its
``runtime_error`` (before or after its builds); only the device's absence lets it through to ``compiled``."""

from __future__ import annotations

import pytest

from musaenv import _env
from musaenv.config import EvalConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc (CUDA_HOME or /usr/local/cuda)"),
]

_BUILD = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor relu_fwd(torch::Tensor x);"
CUDA = r"""
__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.0f);
}
torch::Tensor relu_fwd(torch::Tensor x) {
    auto out = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
"""
'''
_LOAD = 'ext = load_inline(name="ctor_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu_fwd"])\n'


def _answer(body: str) -> str:
    return f"```python\n{body}\n```"


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator("cuda", EvalConfig())
    if not ev.backend.compile_only:
        ev.close()
        pytest.skip("a CUDA GPU is visible: the compile-only path is not taken (see tests/gpu)")
    yield ev
    ev.close()


def _judge(evaluator, body: str):
    return evaluator.evaluate(get_task("l1_relu"), _answer(body), seed=3)


def test_wrong_constructor_signature_after_the_build_is_runtime_error(evaluator):
    r = _judge(
        evaluator,
        _BUILD
        + _LOAD
        + """
class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
    def forward(self, x):
        return ext.relu_fwd(x)
""",
    )
    assert r.stage is Stage.RUNTIME_ERROR, r.to_dict()
    assert "TypeError" in r.runtime_log and "hidden_size" in r.runtime_log


def test_key_error_in_the_constructor_after_its_build_is_runtime_error(evaluator):
    r = _judge(
        evaluator,
        _BUILD
        + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="ctor_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu_fwd"])
        self.cfg = {}["block"]
    def forward(self, x):
        return self.ext.relu_fwd(x)
""",
    )
    assert r.stage is Stage.RUNTIME_ERROR, r.to_dict()
    assert "KeyError: 'block'" in r.runtime_log


def test_name_error_before_the_build_is_the_candidates_not_a_free_retry(evaluator):
    r = _judge(
        evaluator,
        _BUILD
        + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = undefined_scale
        self.ext = load_inline(name="ctor_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu_fwd"])
    def forward(self, x):
        return self.ext.relu_fwd(x)
""",
    )
    assert r.stage is Stage.RUNTIME_ERROR, r.to_dict()
    assert "NameError" in r.runtime_log and "undefined_scale" in r.runtime_log


def test_a_constructor_that_needs_the_device_is_compiled(evaluator):
    r = _judge(
        evaluator,
        _BUILD
        + _LOAD
        + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.ones(4).cuda()  # no CUDA here: the device's absence, not the candidate's error
    def forward(self, x):
        return ext.relu_fwd(x)
""",
    )
    assert r.stage is Stage.COMPILED, r.to_dict()
