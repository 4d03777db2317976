"""The recheck of a candidate's kept timed calls uses the outputs the paired reference already sent."""

from __future__ import annotations

import numpy as np

from musaenv.evaluator.local import _add_rechecks
from musaenv.evaluator.reference import RefOutputs


def test_paired_outputs_fill_the_rechecks_in_call_order() -> None:
    a1, a5, a9 = (np.full(3, v, dtype=np.float32) for v in (1.0, 5.0, 9.0))
    ref = RefOutputs(rechecks=[([a9], ["float32"])], recheck_calls=[9])  # the reference ran only call 9
    _add_rechecks(ref, [1, 5, 9], {1: [a1], 5: [a5]})
    assert ref.recheck_calls == [1, 5, 9]
    assert [r[0][0][0] for r in ref.rechecks] == [1.0, 5.0, 9.0]
    assert ref.rechecks[0][1] == ["float32"]


def test_without_paired_outputs_the_reference_run_stands() -> None:
    a = np.zeros(2)
    ref = RefOutputs(rechecks=[([a], ["float64"])], recheck_calls=[0])
    _add_rechecks(ref, [0], {})
    assert ref.recheck_calls == [0] and ref.rechecks[0][0][0] is a
