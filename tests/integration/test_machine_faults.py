"""A compiler killed from outside mid-build (the OOM killer's SIGKILL) is the machine's fault: ``infra_error``,
nothing sealed in the cache, and the same source judged properly once the machine lets it build."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from musaenv import _env
from musaenv.config import EvalConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task
from musaenv.toolchains.loader import ext_cache_root
from musaenv.types import Stage

pytestmark = pytest.mark.slow

_COMPILERS = {"cc1plus", "cicc", "ptxas"}


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _descends_from_us(pid: int) -> bool:
    me = os.getpid()
    for _ in range(64):
        pid = _parent(pid)
        if pid in (0, 1):
            return False
        if pid == me:
            return True
    return False


@contextmanager
def killing_compilers(limit: int = 1 << 30) -> Iterator[list[str]]:
    """SIGKILL the compiler processes this test's process tree starts (as the OOM killer would), while active, up to
    ``limit`` of them."""
    killed: list[str] = []
    stop = threading.Event()

    def hunt() -> None:
        while not stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    comm = (entry / "comm").read_text().strip()
                except OSError:
                    continue
                if len(killed) < limit and comm in _COMPILERS and _descends_from_us(int(entry.name)):
                    time.sleep(0.3)  # mid-build: the compiler has started reading the headers
                    try:
                        os.kill(int(entry.name), signal.SIGKILL)
                        killed.append(comm)
                    except ProcessLookupError:
                        pass
            time.sleep(0.05)

    t = threading.Thread(target=hunt, daemon=True)
    t.start()
    try:
        yield killed
    finally:
        stop.set()
        t.join()


def _sealed_records(name: str) -> list[Path]:
    entry = ext_cache_root() / name
    return sorted([*entry.glob("failed.json"), *entry.glob("compile_only.*.json")]) if entry.is_dir() else []


def _cpp_candidate(tag: str) -> str:
    return f'''```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
// {tag}: a fresh source, so no cached build answers it
torch::Tensor relu_fwd(torch::Tensor x) {{
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    return out;
}}
"""
ext = load_inline(name="relu_{tag}", cpp_sources=CPP, functions=["relu_fwd"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x)
```'''


def _cuda_candidate(tag: str) -> str:
    return f'''```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor relu_fwd(torch::Tensor x);"
CUDA = r"""
// {tag}: a fresh source, so no cached verdict answers it
__global__ void relu_kernel(const float* x, float* out, int64_t n) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.0f);
}}
torch::Tensor relu_fwd(torch::Tensor x) {{
    auto out = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}}
"""
ext = load_inline(name="relu_{tag}", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu_fwd"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x)
```'''


def _build_names(result) -> list[str]:
    return [b["name"] for b in result.extra.get("builds", []) if b.get("name")]


def test_killed_cpp_compiler_costs_a_rebuild_not_a_verdict():
    """cc1plus SIGKILLed once mid-build: gcc's driver exits 1 with "Killed signal terminated program cc1plus", words
    a candidate's source could print too, so the build is run once more (a forger's text would come back) and the
    candidate is judged on what it wrote; nothing of the killed attempt is sealed."""
    source = _cpp_candidate(uuid.uuid4().hex[:12])
    with LocalEvaluator("cpu", EvalConfig()) as ev, killing_compilers(limit=1) as killed:
        r = ev.evaluate(get_task("l1_relu"), source, seed=1)
    assert killed, "no compiler was seen to kill"
    assert r.stage is Stage.CORRECT, (killed, r.to_dict())
    assert not r.build_cached


def test_fault_text_from_the_source_is_its_compile_error():
    """A source that prints gcc's words for a killed compiler (a #line file name with a newline in it) gets its
    compile error (no unscored retry): built once more, the words came back, so the failure is sealed and the next
    evaluation of the same source is answered from the cache."""
    tag = uuid.uuid4().hex[:12]
    forged = f'''```python
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
// {tag}
#line 1 "x\\ng++: fatal error: Killed signal terminated program cc1plus\\ncompilation terminated.\\ny"
#error forged
#include <torch/extension.h>
torch::Tensor relu_fwd(torch::Tensor x) {{ return x; }}
"""
ext = load_inline(name="forged_{tag}", cpp_sources=CPP, functions=["relu_fwd"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x)
```'''
    with LocalEvaluator("cpu", EvalConfig()) as ev:
        r = ev.evaluate(get_task("l1_relu"), forged, seed=1)
        assert r.stage is Stage.COMPILE_ERROR, r.to_dict()
        assert "Killed signal terminated program" in r.compiler_log
        names = _build_names(r)
        assert names and all(_sealed_records(n) for n in names), "sealed on its second look"
        again = ev.evaluate(get_task("l1_relu"), forged, seed=2)
        assert again.stage is Stage.COMPILE_ERROR and again.build_cached, again.to_dict()


@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc (CUDA_HOME or /usr/local/cuda)")
def test_killed_nvcc_compile_only_is_never_the_candidates():
    """One compiler of nvcc's SIGKILLed mid-check: cudafe++/cicc/ptxas (nvcc exits 137: the step's own status says
    so) is an ``infra_error`` with nothing sealed, and the next evaluation compiles it; the host cc1plus (gcc's words
    only, which a source could print) makes the check run once more, and that run compiles it."""
    with LocalEvaluator("cuda", EvalConfig()) as probe:
        if not probe.backend.compile_only:
            pytest.skip("a CUDA GPU is visible: the compile-only path is not taken")
    source = _cuda_candidate(uuid.uuid4().hex[:12])
    with LocalEvaluator("cuda", EvalConfig()) as ev:
        with killing_compilers(limit=1) as killed:
            r = ev.evaluate(get_task("l1_relu"), source, seed=1)
        assert killed, "no compiler was seen to kill"
        assert r.stage in (Stage.INFRA_ERROR, Stage.COMPILED), (killed, r.to_dict())
        if r.stage is Stage.INFRA_ERROR:
            assert any("killed from outside" in m for m in r.messages), r.messages
            assert all(_sealed_records(n) == [] for n in _build_names(r)), "a killed build was sealed"
            again = ev.evaluate(get_task("l1_relu"), source, seed=1)
            assert again.stage is Stage.COMPILED and not again.build_cached, again.to_dict()
