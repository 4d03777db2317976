"""The backend registry: one record per backend, and no branch on a backend's name outside musaenv/backends/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from musaenv.backends import BACKENDS, REGISTRY, get_backend, loader_aliases, resolve_backend
from musaenv.errors import BackendUnavailableError
from musaenv.evaluator.pool import _device_env
from musaenv.evaluator.ray_backend import _actor_options
from musaenv.verification.static_py import analyze_candidate

PACKAGE = Path(__file__).resolve().parents[3] / "musaenv"


def test_names_are_listed_once_by_the_registry() -> None:
    assert ("auto", *REGISTRY) == BACKENDS
    assert all(name == b.name for name, b in REGISTRY.items())
    assert {"cpu", "cuda", "triton", "musa", "cupy"} <= set(REGISTRY)


def test_unknown_names_are_refused_with_the_list() -> None:
    with pytest.raises(BackendUnavailableError, match=r"unknown backend 'rocm'.*cupy"):
        resolve_backend("rocm")
    with pytest.raises(BackendUnavailableError):
        get_backend("auto")
    assert get_backend("auto", strict=False) is REGISTRY["cpu"]  # how a prompt is written for an unknown name


def test_cpu_resolves_everywhere_and_auto_falls_back_to_it_without_a_gpu() -> None:
    assert resolve_backend("cpu").device == "cpu"
    auto = resolve_backend("auto")
    if auto.name == "cpu":
        assert (auto.tier, auto.reason) == ("cpu", "no GPU visible")
    else:  # a GPU machine: auto picks a backend that says why
        assert auto.reason == REGISTRY[auto.name].auto and not auto.compile_only


def test_loader_aliases_are_the_musa_spelling() -> None:
    assert loader_aliases() == {"musa_sources": "cuda_sources", "extra_musa_cflags": "extra_cuda_cflags"}


@pytest.mark.parametrize(
    ("slot", "env"),
    [("cuda:1", {"CUDA_VISIBLE_DEVICES": "1"}), ("musa:0", {"MUSA_VISIBLE_DEVICES": "0"}), ("cuda", {})],
)
def test_device_slots_pin_workers_with_their_backends_variable(slot: str, env: dict[str, str]) -> None:
    assert _device_env(slot) == env


def test_ray_resources_come_from_the_record() -> None:
    assert _actor_options("cuda", None) == {"num_gpus": 1, "num_cpus": 1}
    assert _actor_options("cupy", None) == {"num_gpus": 1, "num_cpus": 1}
    assert _actor_options("musa", None) == {"resources": {"MUSA": 1}, "num_cpus": 1}
    assert _actor_options("triton", None) == {"num_cpus": 1}
    assert _actor_options("cpu", {"X": 2.0}) == {"resources": {"X": 2.0}, "num_cpus": 1}
    opts = _actor_options("musa", None)
    opts["resources"]["MUSA"] = 5  # a caller's change does not reach the record
    assert REGISTRY["musa"].ray_resources["resources"] == {"MUSA": 1}


_TRITON_ONLY_EXTENSION = """
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="e", cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }", functions=["f"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.f(x)
"""


@pytest.mark.parametrize(("backend", "warned"), [("triton", True), ("cupy", True), ("cpu", False), ("cuda", False)])
def test_backend_mismatch_reads_the_kernel_call_of_the_record(backend: str, warned: bool) -> None:
    flags = [f.flag for f in analyze_candidate(_TRITON_ONLY_EXTENSION, backend=backend, preprocess=False).findings]
    assert ("backend_mismatch" in flags) is warned


_NAMES = "|".join(sorted(REGISTRY))
# A comparison of a backend's name: `backend == "cuda"`, `req.backend in ("cuda", "cupy")`, `.get("backend") != ...`
_BRANCH = re.compile(
    rf"""(backend|backend\.name|\.backend|get\("backend"\))\s*(==|!=|\bin\b|\bnot in\b)\s*[(\[{{]?\s*"({_NAMES})\""""
)


def test_no_branch_on_a_backend_name_outside_the_backends_package() -> None:
    found = [
        f"{p.relative_to(PACKAGE.parent)}:{i}: {line.strip()}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if "backends" not in p.relative_to(PACKAGE).parts[:1]
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if _BRANCH.search(line)
    ]
    assert found == []


def test_the_branch_pattern_sees_the_forms_it_forbids() -> None:
    for line in ('if backend == "cuda":', 'x = req.backend in ("cuda", "cupy")', 'spec.get("backend") != "musa"'):
        assert _BRANCH.search(line), line
    assert not _BRANCH.search('if device.type == "cuda":')
