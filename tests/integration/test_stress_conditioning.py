"""A stress trial's conditioning is judged only where it can change the verdict: where the candidate missed it.

The task's reference rounds ``x`` to the float32 grid of 1e9 (steps of 64): on its own randn inputs an honest kernel
reproduces it exactly, but on a stress trial (|x| up to hundreds) the reference's own rounding takes the whole
tolerance. A kernel that returns ``x`` exactly there misses the stress trials; the reference worker's float64 run
then shows the reference ill-conditioned, and the trials are dropped, not charged. A kernel that reproduces the
reference passes them, and no float64 run is asked for (nothing is dropped).
"""

from __future__ import annotations

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.task import load_task_file
from musaenv.types import Stage

pytestmark = pytest.mark.slow

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return (x + 1e9) - 1e9


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return []
"""

CPP = r"""
#include <torch/extension.h>
#include <cmath>
torch::Tensor snap(torch::Tensor x, bool exact_when_large) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) {
        volatile float v = px[i] + 1e9f;  // volatile: the float32 rounding the reference does, never folded away
        po[i] = (exact_when_large && std::fabs(px[i]) > 8.0f) ? px[i] : v - 1e9f;
    }
    return out;
}
"""

CANDIDATE = '''```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="snap", cpp_sources=r"""{cpp}""", functions=["snap"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.snap(x, {exact})
```'''

CONFIG = EvalConfig(
    run_timeout_s=30.0,
    load_timeout_s=90.0,
    stress_trials=2,
    timing=TimingConfig(enabled=False),
)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    path = tmp_path_factory.mktemp("task") / "snap.py"
    path.write_text(TASK)
    return load_task_file(path)


@pytest.fixture(scope="module")
def evaluator():
    with LocalEvaluator("cpu", CONFIG) as ev:
        yield ev


def test_a_missed_stress_trial_on_an_ill_conditioned_reference_is_dropped(evaluator, task):
    r = evaluator.evaluate(task, CANDIDATE.format(cpp=CPP, exact="True"), seed=3)
    assert r.stage is Stage.CORRECT, r.to_dict()
    skipped = r.extra["stress"]["skipped"]
    assert len(skipped) == 2 and all("float64 disagree" in s for s in skipped), skipped
    assert r.trials_passed == r.trials_total == CONFIG.num_trials  # the dropped trials count for nothing


def test_passed_stress_trials_ask_for_no_float64_run(evaluator, task):
    r = evaluator.evaluate(task, CANDIDATE.format(cpp=CPP, exact="False"), seed=3)
    assert r.stage is Stage.CORRECT, r.to_dict()
    assert r.extra["stress"]["skipped"] == []  # not judged: the reference's float64 run was never asked for
    assert r.trials_passed == r.trials_total == CONFIG.num_trials + 2
