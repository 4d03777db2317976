"""s(c), MusaCoder eq. 2, checked against hand-computed values (defaults lambda = 0.5, v_max = 2)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import musaenv.rewards
from musaenv.config import RewardConfig
from musaenv.errors import ConfigError
from musaenv.rewards.score import (
    candidate_score,
    score_from_config,
    score_range,
    scores_from_results,
    speedup_from_score,
)
from musaenv.types import EvalResult, Stage


def _correct(speedup: float | None, passed: int = 5, total: int = 5) -> EvalResult:
    return EvalResult(stage=Stage.CORRECT, trials_passed=passed, trials_total=total, speedup=speedup)


def _incorrect(passed: int, total: int = 5) -> EvalResult:
    return EvalResult(stage=Stage.INCORRECT, trials_passed=passed, trials_total=total)


@pytest.mark.parametrize(
    "stage", [Stage.FORMAT_ERROR, Stage.COMPILE_ERROR, Stage.RUNTIME_ERROR, Stage.TIMEOUT, Stage.CHEATING]
)
def test_failed_stages_score_minus_one_even_with_trials_passed(stage: Stage) -> None:
    # A cheating verdict must win over passed trials and a big speedup.
    result = EvalResult(stage=stage, trials_passed=5, trials_total=5, speedup=3.0)
    assert candidate_score(result) == -1.0


@pytest.mark.parametrize("stage", [Stage.INFRA_ERROR, Stage.COMPILED])
def test_unscored_stages_give_none(stage: Stage) -> None:
    assert candidate_score(EvalResult(stage=stage)) is None


@pytest.mark.parametrize(
    ("passed", "expected"),
    [
        (0, -1.0),  # q = 0 -> -1
        (1, -0.4),  # -0.5 + 0.5 * 0.2
        (3, -0.2),  # -0.5 + 0.5 * 0.6
        (4, -0.1),  # -0.5 + 0.5 * 0.8
        (5, 0.0),  # incorrect with q = 1 (a later check failed): top of the partial range
    ],
)
def test_incorrect_is_linear_in_pass_fraction(passed: int, expected: float) -> None:
    assert candidate_score(_incorrect(passed)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("speedup", "expected"),
    [
        (None, 1.0),  # untimed: parity
        (0.5, 1.0),  # slower: max(v - 1, 0) = 0
        (1.0, 1.0),
        (1.8, 1.4),  # 1 + 0.5 * 0.8
        (3.0, 2.0),  # 1 + 0.5 * min(2, 2)
        (10.0, 2.0),  # capped: 1 + 0.5 * 2
        (float("inf"), 2.0),
        (float("nan"), 1.0),
    ],
)
def test_correct_adds_capped_speedup_bonus(speedup: float | None, expected: float) -> None:
    assert candidate_score(_correct(speedup)) == pytest.approx(expected)


def test_custom_lambda_and_cap() -> None:
    # 1 + 1.0 * min(2.5 - 1, 3) = 2.5
    assert candidate_score(_correct(2.5), speedup_weight=1.0, speedup_cap=3.0) == pytest.approx(2.5)
    # 1 + 0.25 * min(5 - 1, 1) = 1.25
    assert candidate_score(_correct(5.0), speedup_weight=0.25, speedup_cap=1.0) == pytest.approx(1.25)
    # lambda = 0: every correct kernel scores 1
    assert candidate_score(_correct(5.0), speedup_weight=0.0) == 1.0


def test_correct_stage_with_failed_trials_is_scored_as_partial() -> None:
    # An inconsistent record (correct but 3/5) must not earn the correct score: -0.5 + 0.5 * 0.6
    assert candidate_score(_correct(2.0, passed=3, total=5)) == pytest.approx(-0.2)


def test_correct_stage_without_trial_counts_is_trusted() -> None:
    assert candidate_score({"stage": "correct", "speedup": 1.8}) == pytest.approx(1.4)


def test_mapping_form_matches_record() -> None:
    results = [_correct(1.8), _incorrect(3), EvalResult(stage=Stage.INFRA_ERROR), _incorrect(0)]
    for r in results:
        assert candidate_score(r.to_dict()) == candidate_score(r)
    # -0.5 + 0.5 * 1/4 = -0.375
    assert candidate_score({"stage": "incorrect", "trials_passed": 1, "trials_total": 4}) == pytest.approx(-0.375)


@pytest.mark.parametrize("bad", [{}, {"stage": "great"}, 42])
def test_bad_record_raises_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"stage|EvalResult"):
        candidate_score(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("weight", "cap"), [(-0.1, 2.0), (0.5, -1.0), (float("nan"), 2.0), (0.5, float("inf"))])
def test_bad_parameters_raise(weight: float, cap: float) -> None:
    with pytest.raises(ConfigError):
        candidate_score(_correct(1.5), speedup_weight=weight, speedup_cap=cap)


def test_score_from_config_uses_its_lambda_and_cap() -> None:
    cfg = RewardConfig(speedup_weight=1.0, speedup_cap=1.0)
    # 1 + 1.0 * min(3 - 1, 1) = 2.0
    assert score_from_config(_correct(3.0), cfg) == pytest.approx(2.0)


def test_scores_from_results_masks_infra_errors() -> None:
    results = [EvalResult(stage=Stage.COMPILE_ERROR), EvalResult(stage=Stage.INFRA_ERROR), _correct(1.8)]
    assert scores_from_results(results) == pytest.approx([-1.0, None, 1.4])


def test_score_range() -> None:
    assert score_range() == (-1.0, 2.0)  # 1 + 0.5 * 2
    assert score_range(1.0, 3.0) == (-1.0, 4.0)


def test_speedup_from_score_inverts_the_bonus() -> None:
    assert speedup_from_score(1.4) == pytest.approx(1.8)  # 1 + 0.4 / 0.5
    assert speedup_from_score(2.0) == pytest.approx(3.0)  # at the cap: 1 + v_max
    assert speedup_from_score(1.005) == 1.01  # rounded: float noise would give 1.0099999999999998
    assert speedup_from_score(1.0) == 1.0
    assert speedup_from_score(0.0) is None
    assert speedup_from_score(None) is None
    assert speedup_from_score(1.5, speedup_weight=0.0) is None


def test_rewards_package_never_imports_torch() -> None:
    pkg = Path(musaenv.rewards.__file__).parent
    offenders = []
    for path in sorted(pkg.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "torch"]
    assert len(list(pkg.glob("*.py"))) >= 6
    assert offenders == []
