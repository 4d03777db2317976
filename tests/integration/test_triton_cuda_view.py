"""Triton candidates written for CUDA tensors, judged on the CPU interpreter as a GPU would judge them.

Real worker processes, real Triton interpreter. The candidates are written the way public Triton generations are
(KernelBench-style answers of LLMs): an ``assert x.is_cuda`` guard, allocations on ``device="cuda"``, a PyTorch
fallback for CPU inputs, ``@triton.autotune`` with several configs, the tutorials' ``DEVICE`` from Triton's driver.
"""

from __future__ import annotations

import dataclasses

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.rewards.score import UNSCORED_STAGES
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage

triton = pytest.importorskip("triton")
if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 2):
    pytest.skip("Triton's interpreter needs triton >= 3.2 here", allow_module_level=True)

pytestmark = pytest.mark.slow

FAST = EvalConfig(run_timeout_s=120.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=2.0))

_HEAD = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)
"""

# The most common public form: the launch guarded by an assert on the device, the output allocated on "cuda".
ASSERT_CUDA = (
    _HEAD
    + """

def triton_relu(x: torch.Tensor) -> torch.Tensor:
    assert x.is_cuda, "Input tensor must be on CUDA."
    assert x.device.type == "cuda" and x.get_device() == 0
    x = x.contiguous()
    out = torch.empty(x.shape, device="cuda", dtype=x.dtype)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 16384),)](x, out, n, BLOCK=16384)
    torch.cuda.synchronize()
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1)).cuda()

    def forward(self, x):
        assert torch.cuda.is_available() and self.scale.is_cuda
        return triton_relu(x.to("cuda"))
"""
)

# A fallback for inputs off the GPU: on a GPU the kernel runs, so the interpreter must take that path too.
FALLBACK_ON_CPU = (
    _HEAD
    + """

class ModelNew(nn.Module):
    def forward(self, x):
        if not x.is_cuda:
            return torch.relu(x)
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 16384),)](x, out, x.numel(), BLOCK=16384)
        return out
"""
)

# A kernel that never runs: forward always answers with the reference's own op.
NEVER_LAUNCHES = (
    _HEAD
    + """

class ModelNew(nn.Module):
    def forward(self, x):
        if x.numel() > 0:
            return torch.relu(x)
        out = torch.empty_like(x)
        relu_kernel[(1,)](x, out, 0, BLOCK=16)
        return out
"""
)

# The tutorials' device, and an autotuner with several configs (its benchmarker needs Triton's GPU driver).
AUTOTUNED = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

DEVICE = triton.runtime.driver.active.get_active_torch_device()


@triton.autotune(configs=[triton.Config({"BLOCK": 8192}), triton.Config({"BLOCK": 16384})], key=["n"])
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.to(DEVICE)
        out = torch.empty_like(x, device=DEVICE)
        n = x.numel()
        relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return out
"""

# Sizes its grid by the GPU's multiprocessors: nothing the interpreter can answer.
DEVICE_PROPERTIES = (
    _HEAD
    + """

class ModelNew(nn.Module):
    def forward(self, x):
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        out = torch.empty_like(x)
        relu_kernel[(sms,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(triton.cdiv(x.numel(), sms)))
        return out
"""
)


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator("triton", FAST)
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def kernelbench():
    ev = LocalEvaluator("triton", dataclasses.replace(FAST, static_policy="kernelbench"))
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def permissive():
    ev = LocalEvaluator("triton", dataclasses.replace(FAST, static_policy="permissive"))
    yield ev
    ev.close()


def _calls(r):
    return r.extra["runtime"].get("kernel_calls")


def test_candidate_asserting_cuda_runs_in_the_interpreter_and_is_correct(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), ASSERT_CUDA, seed=1)
    assert r.stage is Stage.CORRECT, r.to_dict()
    assert r.trials_passed == r.trials_total == FAST.num_trials + FAST.stress_count
    assert _calls(r) and all(n >= 1 for n in _calls(r)), r.extra["runtime"]


def test_fallback_for_cpu_inputs_takes_the_kernel_path(kernelbench):
    r = kernelbench.evaluate(get_task("l1_relu"), FALLBACK_ON_CPU, seed=2)
    assert r.stage is Stage.CORRECT, r.to_dict()
    assert all(n == 1 for n in _calls(r)), r.extra["runtime"]
    assert "overwrote" in r.extra["runtime"]["perturb"]  # the launch's output was overwritten and it showed


@pytest.mark.parametrize("policy_fixture", ["kernelbench", "permissive"])
def test_forward_that_launches_no_kernel_is_refused_where_torch_ops_are_tolerated(policy_fixture, request):
    """KernelBench's "some ops may stay in PyTorch" holds only beside a launch of the candidate's own kernel."""
    r = request.getfixturevalue(policy_fixture).evaluate(get_task("l1_relu"), NEVER_LAUNCHES, seed=3)
    assert r.stage is Stage.CHEATING and "no_kernel_call" in r.flags, r.to_dict()
    assert _calls(r) == [0] * 5


def test_forward_that_launches_no_kernel_is_refused_under_strict(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), NEVER_LAUNCHES, seed=3)
    assert r.stage is Stage.CHEATING and "forbidden_torch_op" in r.flags, r.to_dict()  # refused before it runs


def test_autotuned_kernel_with_the_drivers_device_is_correct(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), AUTOTUNED, seed=4)
    assert r.stage is Stage.CORRECT, r.to_dict()


def test_device_properties_need_a_gpu_and_are_not_scored(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), DEVICE_PROPERTIES, seed=5)
    assert r.stage is Stage.COMPILED and r.flags == ("needs_gpu",), r.to_dict()
    assert r.stage in UNSCORED_STAGES
    assert "get_device_properties" in r.messages[0], r.messages
