"""The CUDA split build on a real GPU: the module it links is the one that loads and runs, and it is correct.

Skipped without a visible GPU (tests/conftest.py). Not yet run on a GPU: see docs/gpu-validation.md.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.loader import build_extension
from tests.unit.toolchains.cuda.test_cuda_fast import DECL
from tests.unit.toolchains.cuda.test_cuda_split import KB_ADD

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_split_built_module_loads_and_adds_on_the_gpu(tmp_path):
    spec = BuildSpec.from_load_inline(
        {"cpp_sources": DECL, "cuda_sources": KB_ADD, "functions": ["add_cuda"]}, "cuda", compile_only=False
    )
    out = build_extension(spec, timeout_s=600, root=tmp_path)
    assert out.ok and out.extra.get("tier") == "cuda_split", out.to_dict()
    loaded = importlib.util.spec_from_file_location(out.name, out.so_path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    got = module.add_cuda(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(got, a + b)
