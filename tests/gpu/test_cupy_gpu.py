"""The CuPy candidate format on a real NVIDIA GPU: correct kernels are correct and timed with their launches counted;
a kernel that does not compile, cuBLAS through cupy.matmul, a cached output and a kernel never launched are not
rewarded.

Skipped without a visible GPU (tests/conftest.py) or without the cupy extra. Not yet run on a GPU (docs/backends.md).
"""

from __future__ import annotations

import pytest

pytest.importorskip("cupy", reason="needs the cupy extra")

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage
from tests.gpu.cupy_candidates import (
    BROKEN_RELU_CUPY,
    CACHED_RELU_CUPY,
    MATMUL_FALLTHROUGH_CUPY,
    NO_LAUNCH_CUPY,
    RELU_CUPY,
    SOFTMAX_CUPY,
)
from tests.gpu.reasons import why

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

CONFIG = EvalConfig(timing=TimingConfig(warmup=2, repeats=10, max_time_s=2.0))


@pytest.fixture(scope="module")
def cupy_evaluator():
    ev = LocalEvaluator("cupy", CONFIG)
    assert ev.backend.device == "cuda" and not ev.backend.compile_only
    yield ev
    ev.close()


@pytest.mark.parametrize(("task_id", "source"), [("l1_relu", RELU_CUPY), ("l1_softmax", SOFTMAX_CUPY)])
def test_a_correct_cupy_candidate_is_correct_and_timed_with_its_launches(cupy_evaluator, task_id, source):
    r = cupy_evaluator.evaluate(get_task(task_id), source, seed=1)
    assert r.stage is Stage.CORRECT, why(r)
    assert r.trials_passed == r.trials_total == CONFIG.num_trials
    assert r.speedup is not None and r.speedup > 0 and r.runtime_ms is not None and r.runtime_ms > 0
    assert not {"no_kernel_call", "output_not_from_kernel", "suspicious_speedup"} & set(r.flags + r.warnings)
    calls = r.extra["runtime"].get("kernel_calls")
    assert calls and all(c >= 1 for c in calls), r.extra["runtime"]  # CuPy launches are counted as kernel calls
    assert [b["kind"] for b in r.extra["builds"]] == ["cupy"] and r.compile_time_s is not None


def test_a_cupy_kernel_that_does_not_compile_is_a_compile_error(cupy_evaluator):
    r = cupy_evaluator.evaluate(get_task("l1_relu"), BROKEN_RELU_CUPY, seed=2)
    assert r.stage is Stage.COMPILE_ERROR, why(r)
    assert "xx" in (r.compiler_log or "")


@pytest.mark.parametrize(
    ("task_id", "source", "flags"),
    [
        ("l1_matmul", MATMUL_FALLTHROUGH_CUPY, {"library_compute"}),
        ("l1_relu", NO_LAUNCH_CUPY, {"no_custom_kernel", "forbidden_torch_op"}),
    ],
    ids=["cupy_matmul_fall_through", "never_launched"],
)
def test_hostile_cupy_candidates_are_not_rewarded(cupy_evaluator, task_id, source, flags):
    r = cupy_evaluator.evaluate(get_task(task_id), source, seed=3)
    assert r.stage is Stage.CHEATING, why(r)
    assert flags & set(r.flags), r.flags


def test_an_output_cached_by_address_is_not_rewarded(cupy_evaluator):
    """The repeat of trial 1 (same input) launches nothing; a reused address before it returns a stale output."""
    r = cupy_evaluator.evaluate(get_task("l1_relu"), CACHED_RELU_CUPY, seed=4)
    assert r.stage in (Stage.CHEATING, Stage.INCORRECT), why(r)
    if r.stage is Stage.CHEATING:
        assert {"no_kernel_call", "output_independent_of_input", "nondeterministic"} & set(r.flags), r.flags
