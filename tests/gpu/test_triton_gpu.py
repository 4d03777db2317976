"""Triton backend on a real NVIDIA GPU: every shipped Triton solution compiled by Triton's JIT and judged correct.

Skipped without a visible GPU (tests/conftest.py). Not yet run on a GPU: see docs/gpu-validation.md.
"""

from __future__ import annotations

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids
from musaenv.types import Stage
from tests.gpu.reasons import why

pytest.importorskip("triton")

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

CONFIG = EvalConfig(timing=TimingConfig(warmup=2, repeats=10, max_time_s=2.0))


@pytest.fixture(scope="module")
def triton_evaluator():
    ev = LocalEvaluator("triton", CONFIG)
    assert ev.backend.device == "cuda"
    yield ev
    ev.close()


@pytest.mark.parametrize("task_id", solved_task_ids("triton"))
def test_triton_solution_is_correct_on_gpu(triton_evaluator, task_id):
    r = triton_evaluator.evaluate(get_task(task_id), solution_source(task_id, "triton"), seed=1)
    assert r.stage is Stage.CORRECT, why(r)
    assert r.device == "cuda"
    assert r.trials_passed == r.trials_total == CONFIG.num_trials
