"""The MUSA path on a machine without torch_musa: clear infra errors, never a wrong verdict or a crash.

What runs for real here: the builder's MUSA branch (a ported CUDA candidate's spec goes to torch_musa's loader,
which is missing, so the outcome is an uncached infra error naming the wheel), the keyword mapping onto
torch_musa's ``load_inline`` signature, and a candidate worker asked for device ``musa``.
"""

from __future__ import annotations

import importlib.util

import pytest

from musaenv.backends import BackendInfo
from musaenv.backends.musa_port import port_source
from musaenv.config import EvalConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.toolchains.loader import BuildSpec, build_extension
from musaenv.toolchains.torch_inline import musa_kwargs as _musa_kwargs
from musaenv.types import Stage

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch_musa") is not None, reason="torch_musa is installed: see tests/gpu/test_musa_gpu.py"
)

SPEC = {
    "cpp_sources": ["torch::Tensor f(torch::Tensor x);"],
    "cuda_sources": ["__global__ void k() {}"],
    "functions": ["f"],
    "extra_cflags": [],
    "extra_cuda_cflags": ["-O3"],
    "extra_ldflags": [],
    "extra_include_paths": [],
}


def test_device_sources_and_flags_take_torch_musas_spelling():
    accepted = {"name", "cpp_sources", "musa_sources", "functions", "extra_cflags", "extra_musa_cflags"}
    kwargs = _musa_kwargs(SPEC, accepted)
    assert kwargs == {
        "cpp_sources": SPEC["cpp_sources"],
        "musa_sources": SPEC["cuda_sources"],
        "functions": ["f"],
        "extra_musa_cflags": ["-O3"],
    }


def test_a_loader_that_takes_no_device_sources_is_refused_with_a_reason():
    kwargs = _musa_kwargs(SPEC, {"name", "cpp_sources", "functions"})
    assert isinstance(kwargs, str) and "musa_sources" in kwargs


def test_musa_build_without_torch_musa_is_an_uncached_infra_error(tmp_path):
    spec = BuildSpec(
        cpp_sources=tuple(SPEC["cpp_sources"]),
        cuda_sources=tuple(SPEC["cuda_sources"]),
        functions=("f",),
        backend="musa",
    )
    for _ in range(2):  # the second call must not come from a cached failure
        out = build_extension(spec, timeout_s=120, root=tmp_path)
        assert not out.ok and out.infra_error and not out.cached, out
        assert "torch_musa" in out.log and "nvcc" not in out.log
    assert not (tmp_path / spec.name / "failed.json").exists()


@pytest.mark.slow
def test_worker_for_device_musa_without_torch_musa_is_an_infra_error():
    ported = port_source(solution_source("l1_relu", "cuda")).text
    assert "musa_sources" in ported
    with LocalEvaluator(BackendInfo("musa", "musa", "gpu"), EvalConfig()) as ev:
        r = ev.evaluate(get_task("l1_relu"), ported, seed=0)
    assert r.stage is Stage.INFRA_ERROR, r.to_dict()
    assert "torch_musa" in " ".join(r.messages) + (r.runtime_log or "")
