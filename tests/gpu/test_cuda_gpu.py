"""CUDA and Triton backends on a real NVIDIA GPU: shipped solutions, a wrong kernel, a timing cheat, an episode.

Skipped without a visible GPU (tests/conftest.py). Not yet run on a GPU: see docs/gpu-validation.md.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids
from musaenv.types import Stage
from tests.gpu.cuda_candidates import SIDE_STREAM_RELU_CUDA, WRONG_RELU_CUDA
from tests.gpu.reasons import why

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

CONFIG = EvalConfig(timing=TimingConfig(warmup=2, repeats=10, max_time_s=2.0))


@pytest.fixture(scope="module")
def cuda_evaluator():
    ev = LocalEvaluator("cuda", CONFIG)
    assert ev.backend.device == "cuda" and not ev.backend.compile_only
    yield ev
    ev.close()


@pytest.mark.parametrize("task_id", solved_task_ids("cuda"))
def test_cuda_solution_is_correct_on_gpu(cuda_evaluator, task_id):
    r = cuda_evaluator.evaluate(get_task(task_id), solution_source(task_id, "cuda"), seed=1)
    assert r.stage is Stage.CORRECT, why(r)
    assert r.device == "cuda"
    assert r.trials_passed == r.trials_total == CONFIG.num_trials
    assert r.speedup is not None and r.speedup > 0


def test_wrong_cuda_kernel_is_incorrect(cuda_evaluator):
    r = cuda_evaluator.evaluate(get_task("l1_relu"), WRONG_RELU_CUDA, seed=2)
    assert r.stage is Stage.INCORRECT, why(r)
    assert r.max_abs_error is not None and r.max_abs_error > 0.1


def test_side_stream_timing_cheat_is_flagged(cuda_evaluator):
    r = cuda_evaluator.evaluate(get_task("l1_relu"), SIDE_STREAM_RELU_CUDA, seed=3)
    assert r.stage is Stage.CHEATING, why(r)
    assert "side_stream" in r.flags


def test_episode_on_cuda_backend():
    env = gym.make("KernelGen-v0", task="l1_relu", backend="cuda", max_turns=2)
    obs, info = env.reset(seed=0)
    assert "class Model" in obs
    _, _, terminated, truncated, info = env.step(WRONG_RELU_CUDA)
    assert info["eval"]["stage"] == "incorrect" and not terminated and not truncated
    response = "```python\n" + solution_source("l1_relu", "cuda") + "\n```"
    _, _, terminated, truncated, info = env.step(response)
    assert terminated and info["eval"]["stage"] == "correct", info["eval"]
    assert info["score"] is not None and info["score"] >= 1.0
    env.close()
