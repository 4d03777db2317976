"""LocalEvaluator's stages before any process runs (musaenv.evaluator.local): a response without code and a
static refusal settle the verdict in the parent, and which timed calls are rechecked depends on how many ran."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from musaenv.config import EvalConfig
from musaenv.evaluator.candidate import CandidateRun
from musaenv.evaluator.local import LocalEvaluator, _checked_calls
from musaenv.evaluator.plan import EvalPlan
from musaenv.isolation.messages import Timing
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage

_SHELL = """```python
import os
import torch

class ModelNew(torch.nn.Module):
    def forward(self, x):
        os.system("cat /etc/passwd")
        return x
```"""


@pytest.fixture(scope="module")
def evaluator() -> Iterator[LocalEvaluator]:
    ev = LocalEvaluator("cpu", EvalConfig(fork_server=False))  # no fork server: nothing starts until stage 4
    try:
        yield ev
    finally:
        ev.close()


def test_a_response_without_code_is_a_format_error_before_any_worker(evaluator: LocalEvaluator) -> None:
    task = get_task("l1_relu")
    first = evaluator.evaluate(task, "I would write a kernel, but here is only prose.")
    assert first.stage is Stage.FORMAT_ERROR and first.task_id == task.id and first.backend == "cpu"
    assert first == evaluator.evaluate(task, "I would write a kernel, but here is only prose.")  # no timing in it
    assert evaluator._spare is None  # no worker was started for it


def test_a_static_refusal_is_the_verdict_before_any_worker(evaluator: LocalEvaluator) -> None:
    result = evaluator.evaluate(get_task("l1_relu"), _SHELL)
    assert result.stage is Stage.CHEATING and result.flags and result.task_id == "l1_relu"
    assert result.eval_time_s is not None and result.policy == "strict"
    assert evaluator._spare is None


def _plan(keep: tuple[int, ...]) -> EvalPlan:
    return EvalPlan(shapes=(), init_seed=1, trials=(), timing_seed=2, timing_pool=4, keep=keep, probe_seed=7)


def test_checked_calls_add_the_last_call_and_probe_others_from_the_plan_seed() -> None:
    run = CandidateRun(timing=(Timing(samples_ms=[1.0] * 10), []))
    kept, probes = _checked_calls(_plan((2, 5)), run, probes=3)
    assert kept == [2, 5, 9]  # the plan's calls and the last one that ran
    assert len(probes) == 3 and not set(probes) & set(kept) and all(0 <= p < 10 for p in probes)
    assert _checked_calls(_plan((2, 5)), run, probes=3) == (kept, probes)  # drawn from the plan's seed


def test_checked_calls_without_timing_keep_the_plan() -> None:
    assert _checked_calls(_plan((1,)), CandidateRun(), probes=3) == ([1], [])
    assert _checked_calls(_plan((1,)), CandidateRun(timing=(Timing(samples_ms=[]), [])), probes=3) == ([1], [])
