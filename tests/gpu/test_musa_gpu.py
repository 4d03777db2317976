"""MUSA backend on a Moore Threads GPU: ported CUDA solutions built by torch_musa's loader, and a wrong kernel.

Skipped without torch_musa and a MUSA device (tests/conftest.py). Never run so far: no session had MUSA hardware.
"""

from __future__ import annotations

import pytest

from musaenv.backends.musa_port import port_source
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids
from musaenv.types import Stage
from tests.gpu.cuda_candidates import WRONG_RELU_CUDA
from tests.gpu.reasons import why

pytestmark = [pytest.mark.musa, pytest.mark.slow]

CONFIG = EvalConfig(timing=TimingConfig(warmup=2, repeats=10, max_time_s=2.0))


@pytest.fixture(scope="module")
def musa_evaluator():
    ev = LocalEvaluator("musa", CONFIG)
    assert ev.backend.device == "musa"
    yield ev
    ev.close()


@pytest.mark.parametrize("task_id", solved_task_ids("cuda"))
def test_ported_cuda_solution_is_correct_on_musa(musa_evaluator, task_id):
    ported = port_source(solution_source(task_id, "cuda")).text
    r = musa_evaluator.evaluate(get_task(task_id), ported, seed=1)
    assert r.stage is Stage.CORRECT, why(r)
    assert r.device == "musa" and r.speedup is not None and r.speedup > 0


def test_wrong_ported_kernel_is_incorrect_on_musa(musa_evaluator):
    r = musa_evaluator.evaluate(get_task("l1_relu"), port_source(WRONG_RELU_CUDA).text, seed=2)
    assert r.stage is Stage.INCORRECT, why(r)
