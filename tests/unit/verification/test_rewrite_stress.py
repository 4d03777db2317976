"""The in-place rewrite check (``stale_output``) compares a stress trial as the trial itself was compared."""

from __future__ import annotations

import numpy as np

from musaenv.isolation.reports import RuntimeReports, TrialsReport
from musaenv.verification.runtime import RuntimeSettings, assess_runtime

TOL = (1e-4, 1e-4)
ON = RuntimeSettings("off", checks=True)


def _judge(rewritten: np.ndarray, ref_later: np.ndarray, stress: tuple[int, ...]) -> list[str]:
    rng = np.random.default_rng(0)
    first = rng.standard_normal(4096).astype(np.float32)
    report = RuntimeReports(trials=TrialsReport(rewrite_outputs=1, rewrite_trial=1, kernel_calls=[1, 1]))
    ref = [[first], [ref_later]]
    out = assess_runtime(report, [rewritten], ref, ref, [True, True], TOL, ON, stress)
    return out.flags


def test_a_rounding_size_miss_on_a_stress_trial_is_not_a_stale_output():
    later = np.linspace(400.0, 500.0, 131072, dtype=np.float32)  # a stress trial's offset values
    near = later.copy()
    near[[7, 900, 70000]] += later[[7, 900, 70000]] * 7e-4  # 3 of 131072 values at 7x the tolerance
    assert _judge(near, later, stress=(1,)) == []
    assert _judge(near, later, stress=()) == ["stale_output"]  # a task's own trial keeps the strict comparison


def test_an_old_answer_on_a_stress_trial_is_still_stale():
    later = np.linspace(400.0, 500.0, 131072, dtype=np.float32)
    stale = np.linspace(-1.0, 1.0, 131072, dtype=np.float32)  # the first trial's kind of values, served again
    assert _judge(stale, later, stress=(1,)) == ["stale_output"]
