"""The HIP backend, added as one file (musaenv/backends/hip.py): what every part of the package reads of it.

Neither ROCm's torch nor hipcc is on the development machines: the refusal, the routing of a compile-only build to
its own check and its record's reads run everywhere; the hipcc check runs where hipcc is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from musaenv.backends import BACKENDS, get_backend, resolve_backend
from musaenv.backends.hip import hipcc
from musaenv.errors import BackendUnavailableError
from musaenv.evaluator.ray_backend import _actor_options
from musaenv.tasks.builtin import get_task
from musaenv.tasks.prompts import initial_prompt
from musaenv.toolchains.loader import BuildSpec, build_extension
from musaenv.verification.static_py import analyze_candidate

_ROCM = False
try:
    import torch

    _ROCM = getattr(torch.version, "hip", None) is not None
except ImportError:
    pass

KERNEL = """
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
PROGRAM = '''
import torch
from torch.utils.cpp_extension import load_inline
CUDA = """{kernel}"""
ext = load_inline(name="e", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=CUDA, functions=["f"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.f(x)
'''


def _spec(cuda: str) -> BuildSpec:
    kw = {"name": "hip_check", "cpp_sources": "", "cuda_sources": cuda, "functions": []}
    return BuildSpec.from_load_inline(kw, "hip", compile_only=True)


def test_hip_is_a_name_everywhere_once_registered() -> None:
    assert "hip" in BACKENDS
    assert _actor_options("hip", None) == {"num_gpus": 1, "num_cpus": 1}
    prompt = initial_prompt(get_task("l1_relu"), get_backend("hip"), "gpu")
    assert "hipcc" in prompt and "load_inline" in prompt


def _flags(kernel: str) -> list[str]:
    report = analyze_candidate(PROGRAM.format(kernel=kernel), backend="hip", policy="kernelbench", preprocess=False)
    return [f.flag for f in report.findings]


def test_kernelbench_policy_wants_a_global_kernel_from_hip_candidates() -> None:
    assert "no_custom_kernel" not in _flags(KERNEL)
    assert "no_custom_kernel" in _flags("int x;")


@pytest.mark.skipif(hipcc() is not None or _ROCM, reason="hipcc or ROCm's torch is here: the backend resolves")
def test_without_rocm_or_hipcc_it_is_refused_with_the_remedy() -> None:
    with pytest.raises(BackendUnavailableError, match="hipcc"):
        resolve_backend("hip")


@pytest.mark.skipif(hipcc() is not None, reason="hipcc is here: the check runs (next test)")
def test_a_compile_only_build_goes_to_hips_own_check(tmp_path: Path) -> None:
    out = build_extension(_spec(KERNEL), timeout_s=60, root=tmp_path)  # the real build service and builder
    assert not out.ok and out.infra_error  # the machine cannot judge it: never the candidate's compile_error
    assert "no hipcc on this machine" in out.log


@pytest.mark.skipif(hipcc() is None, reason="needs hipcc (ROCm)")
def test_hipcc_passes_a_kernel_and_fails_a_broken_one(tmp_path: Path) -> None:
    assert resolve_backend("hip").name == "hip"
    good = build_extension(_spec(KERNEL), timeout_s=300, root=tmp_path / "good")
    bad = build_extension(_spec(KERNEL.replace("2.0f *", "undeclared *")), timeout_s=300, root=tmp_path / "bad")
    assert good.ok, good.log
    assert not bad.ok and not bad.infra_error and "undeclared" in bad.log
