"""The metric functions against hand-computed values and their edge cases (n < k, c = 0, c = n)."""

from __future__ import annotations

import math
import random

import pytest

from musaenv.bench.metrics import (
    FAST_P_THRESHOLDS,
    Outcome,
    avg_at_k,
    fast_p,
    geomean,
    pass_at_k,
    pass_at_k_values,
    summarize,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # pass@1 = c / n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2) / C(5,2)
        (5, 2, 4, 1.0),  # n - c = 3 < k: every draw of 4 holds a correct one
        (8, 1, 8, 1.0),
        (8, 3, 2, 1 - 10 / 28),  # 1 - C(5,2) / C(8,2)
        (4, 0, 1, 0.0),  # c = 0
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),  # c = n
        (1, 1, 1, 1.0),
        (200, 1, 100, 0.5),  # 1 - C(199,100) / C(200,100) = 1 - 100/200, exact with integer binomials
    ],
)
def test_pass_at_k_hand_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_the_probability_of_a_random_draw() -> None:
    # pass@k is the chance that k samples drawn without replacement hold a correct one.
    n, c, k = 10, 3, 4
    rng = random.Random(0)
    draws = 20000
    hits = sum(any(i < c for i in rng.sample(range(n), k)) for _ in range(draws))
    assert pass_at_k(n, c, k) == pytest.approx(hits / draws, abs=0.015)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(7, 4) / math.comb(10, 4))


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0)])
def test_pass_at_k_refuses_counts_out_of_range(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def test_k_values_are_powers_of_two_up_to_the_fewest_samples() -> None:
    assert pass_at_k_values([8, 8]) == [1, 2, 4, 8]
    assert pass_at_k_values([5, 9]) == [1, 2, 4]
    assert pass_at_k_values([1, 100]) == [1]
    assert pass_at_k_values([]) == []


def _o(task: str, stage: str, speedup: float | None = None, level: int = 1, q: float = 0.0) -> Outcome:
    return Outcome(task, level, stage, speedup, q if stage != "correct" else 1.0)


def test_fast_p_counts_correct_samples_strictly_faster_than_p_over_all_scored_samples() -> None:
    outs = [
        _o("a", "correct", 2.0),
        _o("a", "correct", 1.1),  # exactly p = 1.1: not faster than 1.1
        _o("a", "correct", 0.5),
        _o("b", "incorrect", 3.0),  # fast but wrong
        _o("b", "correct", None),  # not timed: counts for p = 0 only
        _o("b", "infra_error", 9.0),  # the harness failed: out of the denominator
    ]
    assert fast_p(outs, 0.0) == 4 / 5
    assert fast_p(outs, 0.5) == 2 / 5
    assert fast_p(outs, 1.0) == 2 / 5
    assert fast_p(outs, 1.1) == 1 / 5
    assert fast_p(outs, 2.0) == 0.0
    assert fast_p([_o("a", "infra_error")], 1.0) is None


def test_geomean_and_avg_at_k() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None
    assert geomean([0.0, -1.0, float("nan")]) is None
    assert avg_at_k([(4, 1), (2, 2)]) == pytest.approx((0.25 + 1.0) / 2)
    assert avg_at_k([]) is None


def test_summary_by_hand() -> None:
    outs = [
        _o("a", "correct", 2.0),
        _o("a", "compile_error"),
        _o("a", "incorrect", q=0.4),
        _o("a", "infra_error"),
        _o("b", "correct", 0.5, level=2),
        _o("b", "correct", 0.8, level=2),
        _o("b", "cheating", level=2),
    ]
    s = summarize(outs)
    assert (s["tasks"], s["samples"], s["scored_samples"]) == (2, 7, 6)
    assert s["verdicts"] == {"cheating": 1, "compile_error": 1, "correct": 3, "incorrect": 1, "infra_error": 1}
    assert s["correct_rate"] == pytest.approx(3 / 6)
    # a: n=3, c=1; b: n=3, c=2.
    assert s["pass_at_k"] == pytest.approx({"1": (1 / 3 + 2 / 3) / 2, "2": ((1 - 1 / 3) + 1.0) / 2})
    assert s["avg_at_k"] == pytest.approx({"3": 0.5})
    assert s["mean_trial_pass_fraction"] == pytest.approx((1 + 0.4 + 1 + 1) / 6)
    assert set(s["fast_p"]) == {str(p) for p in FAST_P_THRESHOLDS}
    assert s["fast_p"]["0.0"] == pytest.approx(3 / 6)
    assert s["fast_p"]["0.8"] == pytest.approx(1 / 6)  # 0.8 is not > 0.8
    assert s["geomean_speedup"] == pytest.approx((2.0 * 0.5 * 0.8) ** (1 / 3))
    assert s["by_level"]["1"]["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 2 / 3})
    assert s["by_level"]["2"]["verdicts"] == {"cheating": 1, "correct": 2}
    assert s["per_task"]["b"] == {"level": 2, "n": 3, "correct": 2, "best_speedup": 0.8}
    assert summarize(reversed(outs)) == s  # order of the rows does not matter


def test_summary_without_scored_samples_has_no_rates() -> None:
    s = summarize([_o("a", "infra_error"), _o("a", "compiled")])
    assert s["correct_rate"] is None and s["pass_at_k"] == {} and s["geomean_speedup"] is None
    assert s["fast_p"]["1.0"] is None and s["verdicts"] == {"compiled": 1, "infra_error": 1}
    assert summarize([])["tasks"] == 0


def test_fast_p_judges_a_paired_speedup_by_its_intervals_lower_end() -> None:
    """A speedup of 1.3x whose 95 % interval reaches down to 0.9x is not claimed as faster than 1.0 (the threshold
    rule of docs/rewards.md); one whose interval clears 1.0 is; without an interval the point estimate decides."""
    straddles = Outcome("a", 1, "correct", speedup=1.3, speedup_low=0.9)
    clears = Outcome("b", 1, "correct", speedup=1.3, speedup_low=1.05)
    cached = Outcome("c", 1, "correct", speedup=1.3)
    assert fast_p([straddles], 1.0) == 0.0
    assert fast_p([clears], 1.0) == 1.0 and fast_p([clears], 1.1) == 0.0
    assert fast_p([cached], 1.0) == 1.0
    assert fast_p([straddles, clears, cached], 0.0) == 1.0  # correctness: the interval plays no part
