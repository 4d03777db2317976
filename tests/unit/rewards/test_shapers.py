"""primeecho, best, last, per_turn, delta against hand-computed rewards.

Scores use the default s(c) (lambda = 0.5, v_max = 2): -1 failed, -0.2 = 3/5 trials, 1.0 correct at parity,
1.4 correct at 1.8x. PrimeEcho defaults: alpha = 0.75, B1 = 0.2, B2 = 0.1.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from musaenv.rewards import make_shaper
from musaenv.rewards.score import scores_from_results
from musaenv.types import EvalResult, Stage

THREE_TURNS = [-1.0, -0.2, 1.4]  # fails, partial, then correct at 1.8x


def rewards(name: str, scores: Sequence[float | None], **kwargs: float) -> list[float]:
    return make_shaper(name, **kwargs).episode_rewards(scores)


def test_primeecho_three_turns() -> None:
    # 0.75 * -1 + 0.25 * max(-1, -0.2, 1.4) + 0 (turns 1 and 2 fail) = -0.75 + 0.35 = -0.4, paid on turn 1
    assert rewards("primeecho", THREE_TURNS) == pytest.approx([-0.4, 0.0, 0.0])


def test_primeecho_early_success_single_turn() -> None:
    # 0.75 * 1.4 + 0.25 * 1.4 + B1 0.2 = 1.6
    assert rewards("primeecho", [1.4]) == pytest.approx([1.6])


def test_primeecho_single_failed_turn() -> None:
    # 0.75 * -1 + 0.25 * -1 + 0 = -1
    assert rewards("primeecho", [-1.0]) == pytest.approx([-1.0])


def test_primeecho_second_turn_success_gets_b2() -> None:
    # 0.75 * -0.2 + 0.25 * 1.0 + B2 0.1 = -0.15 + 0.25 + 0.1 = 0.2
    assert rewards("primeecho", [-0.2, 1.0]) == pytest.approx([0.2, 0.0])


def test_primeecho_custom_parameters() -> None:
    # 0.5 * -1 + 0.5 * 1.4 + B2 0.5 = 0.7
    got = rewards("primeecho", [-1.0, 1.4], alpha=0.5, bonus_turn1=1.0, bonus_turn2=0.5)
    assert got == pytest.approx([0.7, 0.0])
    # success_threshold 1.2: s_1 = 1.0 is no success, s_2 = 1.4 is: 0.75 * 1.0 + 0.25 * 1.4 + 0.1 = 1.2
    assert rewards("primeecho", [1.0, 1.4], success_threshold=1.2) == pytest.approx([1.2, 0.0])


def test_fail_on_purpose_earns_less_than_first_turn_success_under_primeecho_only() -> None:
    sandbag = [-1.0, 1.4]  # fail on purpose at turn 1, then submit the good kernel
    honest = [1.4]  # submit it at once
    prime = make_shaper("primeecho")
    best = make_shaper("best")
    # primeecho: sandbag 0.75 * -1 + 0.25 * 1.4 + 0.1 = -0.3; honest 1.6 (above)
    assert prime.episode_return(sandbag) == pytest.approx(-0.3)
    assert prime.episode_return(honest) == pytest.approx(1.6)
    assert prime.episode_return(sandbag) < prime.episode_return(honest)
    # best: both max = 1.4
    assert best.episode_return(sandbag) == pytest.approx(1.4)
    assert best.episode_return(honest) == pytest.approx(1.4)


def test_best_last_per_turn_delta_three_turns() -> None:
    assert rewards("best", THREE_TURNS) == pytest.approx([1.4, 0.0, 0.0])  # max
    assert rewards("last", THREE_TURNS) == pytest.approx([0.0, 0.0, 1.4])  # s_T on turn T
    assert rewards("per_turn", THREE_TURNS) == pytest.approx([-1.0, -0.2, 1.4])  # raw
    # s_1, s_2 - s_1 = -0.2 + 1 = 0.8, s_3 - s_2 = 1.4 + 0.2 = 1.6; sum = 1.4 = s_T
    assert rewards("delta", THREE_TURNS) == pytest.approx([-1.0, 0.8, 1.6])


@pytest.mark.parametrize("name", ["best", "last", "per_turn", "delta"])
def test_single_turn_episode_pays_the_score(name: str) -> None:
    assert rewards(name, [1.4]) == pytest.approx([1.4])
    assert rewards(name, [-1.0]) == pytest.approx([-1.0])


def test_delta_regression_is_penalised_on_its_turn() -> None:
    # 1.4, then 1.0 - 1.4 = -0.4
    assert rewards("delta", [1.4, 1.0]) == pytest.approx([1.4, -0.4])


def test_masked_turns_get_zero_and_are_skipped() -> None:
    # Masked first turn: the first unmasked turn is "turn 1": 0.75 * -1 + 0.25 * 1.0 + B2 0.1 = -0.4 on raw turn 2
    assert rewards("primeecho", [None, -1.0, 1.0]) == pytest.approx([0.0, -0.4, 0.0])
    # Masked middle turn: raw turn 3 is "turn 2" for the bonus, same -0.4, on raw turn 1
    assert rewards("primeecho", [-1.0, None, 1.0]) == pytest.approx([-0.4, 0.0, 0.0])
    # The infra error is not a failure: [-0.2, None] is 0.75 * -0.2 + 0.25 * -0.2 = -0.2, not pulled to -1
    assert rewards("primeecho", [-0.2, None]) == pytest.approx([-0.2, 0.0])
    assert rewards("best", [None, 1.0]) == pytest.approx([0.0, 1.0])
    assert rewards("last", [1.0, None]) == pytest.approx([1.0, 0.0])  # last unmasked turn
    assert rewards("per_turn", [-1.0, None, 1.0]) == pytest.approx([-1.0, 0.0, 1.0])
    # delta relative to the last unmasked score: 1.0 - (-1.0) = 2.0
    assert rewards("delta", [-1.0, None, 1.0]) == pytest.approx([-1.0, 0.0, 2.0])


@pytest.mark.parametrize("name", ["primeecho", "best", "last", "per_turn", "delta"])
def test_all_masked_and_empty_episodes(name: str) -> None:
    shaper = make_shaper(name)
    assert shaper.episode_rewards([None, None]) == [0.0, 0.0]
    assert shaper.loss_weights([None, None]) == [0.0, 0.0]
    assert shaper.episode_rewards([]) == []


def test_loss_weights() -> None:
    for name in ("primeecho", "best"):
        shaper = make_shaper(name)
        assert shaper.loss_weights(THREE_TURNS) == [1.0, 0.0, 0.0]  # first turn only (MusaCoder)
        assert shaper.loss_weights([None, -1.0, 1.0]) == [0.0, 1.0, 0.0]
    for name in ("last", "per_turn", "delta"):
        shaper = make_shaper(name)
        assert shaper.loss_weights(THREE_TURNS) == [1.0, 1.0, 1.0]
        assert shaper.loss_weights([-1.0, None, 1.0]) == [1.0, 0.0, 1.0]


def test_group_rewards_default_applies_each_episode() -> None:
    shaper = make_shaper("primeecho")
    # all-failed group: every episode -1 (0.75 * -1 + 0.25 * -1)
    assert shaper.group_rewards([[-1.0, -1.0, -1.0], [-1.0]]) == [[-1.0, 0.0, 0.0], [-1.0]]


def test_from_eval_results_end_to_end() -> None:
    results = [
        EvalResult(stage=Stage.COMPILE_ERROR),
        EvalResult(stage=Stage.INFRA_ERROR),
        EvalResult(stage=Stage.CORRECT, trials_passed=5, trials_total=5, speedup=1.8),
    ]
    scores = scores_from_results(results)  # [-1, None, 1.4]
    # 0.75 * -1 + 0.25 * 1.4 + B2 0.1 (raw turn 3 is the second unmasked turn) = -0.3
    assert make_shaper("primeecho").episode_rewards(scores, results) == pytest.approx([-0.3, 0.0, 0.0])
