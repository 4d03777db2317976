"""A KernelBench-format file of our own, as a user brings one: derived shapes catch a kernel hard-coded to the
first shape (real g++, real extension loader, real workers; one C++ compile for both candidates)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import musaenv  # noqa: F401 - registers the env ids
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage

pytestmark = pytest.mark.slow

FILE = Path(__file__).parents[1] / "data" / "tasks" / "row_offset.py"

# One extension, two functions: the general kernel reads the row length from the tensor; the other uses the
# row length of the task's first cpu shape (substituted below), as a kernel written for the shown sizes would.
CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
static torch::Tensor offset(torch::Tensor x, int64_t cols) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) po[i] = px[i] - px[(i / cols) * cols];
    return out;
}
torch::Tensor general(torch::Tensor x) { return offset(x, x.size(1)); }
torch::Tensor fixed(torch::Tensor x, int64_t cols) { return offset(x, cols); }
"""

ext = load_inline(name="row_offset_ext", cpp_sources=CPP, functions=["general", "fixed"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return CALL
'''


def _candidate(call: str) -> str:
    return "```python\n" + CANDIDATE.replace("CALL", call) + "```"


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MUSAENV_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield get_task(str(FILE))
    mp.undo()


def test_external_file_gets_two_cpu_shapes_and_prompt_shows_them(task):
    cpu = task.shapes_for("cpu")
    assert len(cpu) == 2 and cpu[0]["dim"] != cpu[1]["dim"] and cpu[1]["dim"] % 2 == 1
    assert task.shapes_for("gpu")[0] == {} and task.warnings == ()
    env = gym.make("KernelGen-v0", task=task, backend="cpu")
    obs, info = env.reset(seed=0)
    env.close()
    assert f"dim={cpu[0]['dim']}" in obs and f"dim={cpu[1]['dim']}" in obs
    assert f"dim = {cpu[0]['dim']}" in obs  # the program shown is the timing shape's
    assert info["task_warnings"] == []


def test_kernel_hard_coded_to_first_shape_is_incorrect(task):
    cols = task.shapes_for("cpu")[0]["dim"]
    config = EvalConfig(tier="cpu", timing=TimingConfig(repeats=3, warmup=1, max_time_s=1.0))
    with LocalEvaluator("cpu", config) as ev:
        good = ev.evaluate(task, _candidate("ext.general(x)"), seed=3)
        hard = ev.evaluate(task, _candidate(f"ext.fixed(x, {cols})"), seed=3)
    assert good.stage is Stage.CORRECT, good.to_dict()
    assert hard.stage is Stage.INCORRECT, hard.to_dict()
    assert 0 < hard.trials_passed < hard.trials_total  # right on the first shape, wrong on the odd one
