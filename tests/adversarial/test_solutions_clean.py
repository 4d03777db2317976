"""No false positives: every shipped CPU reference solution stays ``correct`` under every defence.

Slow: it builds one extension per solution (about 20; some 10 minutes cold on two cores, seconds when cached).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.rewards import candidate_score
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids
from musaenv.types import Stage
from musaenv.verification.runtime import RUNTIME_FLAGS

pytestmark = pytest.mark.slow

# Every defence at its default (static strict, runtime strict, runtime checks on); short timing, a long build limit.
ALL_DEFENCES = EvalConfig(compile_timeout_s=600.0, timing=TimingConfig(warmup=1, repeats=5, max_time_s=1.0))


@pytest.fixture(scope="module")
def evaluator() -> Iterator[LocalEvaluator]:
    ev = LocalEvaluator("cpu", ALL_DEFENCES)
    yield ev
    ev.close()


@pytest.mark.parametrize("task_id", solved_task_ids("cpu"))
def test_solution_is_correct_under_every_defence(evaluator: LocalEvaluator, task_id: str) -> None:
    r = evaluator.evaluate(get_task(task_id), solution_source(task_id, "cpu"), seed=11)
    detail = f"stage={r.stage.value} flags={r.flags} warnings={r.warnings} messages={r.messages[:4]}"
    assert r.stage is Stage.CORRECT and not r.flags, detail
    assert not set(r.warnings) & set(RUNTIME_FLAGS), detail  # not even a runtime warning
    assert r.extra["runtime"]["forbidden_ops"] == []
    assert all(n >= 1 for n in r.extra["runtime"]["kernel_calls"])
    score = candidate_score(r)
    assert score is not None and score >= 1.0


@pytest.mark.parametrize("task_id", ["l1_layernorm", "l2_add_layernorm"])
def test_normalisation_without_its_scale_and_shift_fails(evaluator: LocalEvaluator, task_id: str) -> None:
    """HACKS S6 for norms: with default weights (ones, zeros) a kernel that skips the affine step would pass."""
    src = solution_source(task_id, "cpu")
    skipped = src.replace("* pw[i] + pb[i]", "")
    assert skipped != src  # the shipped kernel applies the affine step exactly there
    r = evaluator.evaluate(get_task(task_id), skipped, seed=12)
    assert r.stage is Stage.INCORRECT and r.trials_passed == 0, r.to_dict()
