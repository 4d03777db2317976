"""The build path of a candidate's builds in its EvalResult: the tier, its time, the faster paths that did not apply,
and the same tier again when the artifact comes from the cache (real g++, real workers, the CPU backend)."""

from __future__ import annotations

import uuid

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task
from musaenv.types import BuildRecord, EvalResult, Stage

pytestmark = pytest.mark.slow

FAST = EvalConfig(run_timeout_s=20.0, load_timeout_s=60.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=1.0))

_CANDIDATE = '''```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
// {token}: a new source each run, so the first evaluation builds
torch::Tensor relu_tier(torch::Tensor x) {{
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    return out;
}}
{broken}
"""

ext = load_inline(name="tiers", cpp_sources=CPP, functions=["relu_tier"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_tier(x)
```'''


def _candidate(broken: bool = False) -> str:
    return _CANDIDATE.format(token=uuid.uuid4().hex, broken="int broken( { return 1 }" if broken else "")


def _only_build(r: EvalResult) -> BuildRecord:
    assert len(r.extra["builds"]) == 1, r.to_dict()
    return BuildRecord.from_dict(r.extra["builds"][0])


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator("cpu", FAST)
    yield ev
    ev.close()


def test_the_tier_is_in_the_result_and_again_on_a_cache_hit(evaluator) -> None:
    relu, response = get_task("l1_relu"), _candidate()
    first = evaluator.evaluate(relu, response, seed=1)
    assert first.stage is Stage.CORRECT, first.to_dict()
    built = _only_build(first)
    assert built.ok and not built.cached and built.seconds > 0
    assert built.tier in ("split", "pch") and first.build_tier == built.tier
    if built.tier == "pch":  # the faster split tier did not apply: the record says why
        assert [d["tier"] for d in built.declined][:1] == ["split"] and built.declined[0]["why"]
    assert EvalResult.from_dict(first.to_dict()) == first  # the record survives JSON (recording, Ray, bench rows)

    again = evaluator.evaluate(relu, response, seed=2)
    hit = _only_build(again)
    assert hit.cached and again.build_cached is True
    assert (hit.tier, hit.declined, again.build_tier) == (built.tier, built.declined, built.tier)


def test_a_sealed_compile_error_reports_the_tier_that_judged_it(evaluator) -> None:
    relu, response = get_task("l1_relu"), _candidate(broken=True)
    first = evaluator.evaluate(relu, response, seed=1)
    assert first.stage is Stage.COMPILE_ERROR, first.to_dict()
    judged = _only_build(first)
    assert not judged.ok and not judged.cached and judged.tier in ("split", "pch")
    again = evaluator.evaluate(relu, response, seed=2)
    hit = _only_build(again)
    assert again.stage is Stage.COMPILE_ERROR and hit.cached
    assert (hit.tier, again.build_tier) == (judged.tier, judged.tier)
