"""GRPO advantages, TRLOO baselines and the no-signal tests against hand-computed values."""

from __future__ import annotations

import pytest

from musaenv.errors import ConfigError
from musaenv.rewards.group import all_failed, grpo_advantages, trloo_advantages, trloo_baselines, zero_advantage


def test_grpo_advantages_hand_computed() -> None:
    # mean 2, centred [-1, 0, 1], sample std sqrt(2 / 2) = 1
    assert grpo_advantages([1.0, 2.0, 3.0], eps=0.0) == pytest.approx([-1.0, 0.0, 1.0])
    # mean 1, centred [-1, -1, -1, 3], sample var (1 + 1 + 1 + 9) / 3 = 4, std 2
    assert grpo_advantages([0.0, 0.0, 0.0, 4.0], eps=0.0) == pytest.approx([-0.5, -0.5, -0.5, 1.5])
    # eps enters the denominator: 3 / (2 + 1) = 1
    assert grpo_advantages([0.0, 0.0, 0.0, 4.0], eps=1.0) == pytest.approx([-1 / 3, -1 / 3, -1 / 3, 1.0])
    assert grpo_advantages([0.0, 0.0, 0.0, 4.0], scale=False) == pytest.approx([-1.0, -1.0, -1.0, 3.0])


def test_grpo_all_equal_or_single_gives_zeros() -> None:
    assert grpo_advantages([-1.0, -1.0, -1.0]) == [0.0, 0.0, 0.0]  # all-failed group
    assert grpo_advantages([1.6]) == [0.0]
    assert grpo_advantages([]) == []


def test_grpo_rejects_non_finite() -> None:
    with pytest.raises(ConfigError):
        grpo_advantages([1.0, float("nan")])


def test_zero_advantage() -> None:
    assert zero_advantage([1.0, 1.0 + 1e-12])
    assert not zero_advantage([1.0, 1.1])
    assert zero_advantage([1.0, 1.1], tol=0.2)
    assert zero_advantage([])


def test_all_failed() -> None:
    assert all_failed([[-1.0, -0.2], [None, 0.5]])
    assert not all_failed([[-1.0, -1.0], [-1.0, 1.0]])
    assert all_failed([[None]])  # nothing scored: nothing succeeded
    assert not all_failed([[1.0]], success_threshold=1.0)
    assert all_failed([[1.0]], success_threshold=1.2)


def test_trloo_baselines_hand_computed() -> None:
    group = [[1.0, 2.0, 3.0], [3.0, 4.0], [5.0]]
    # ep0: turn1 mean(3, 5) = 4, turn2 mean(4) = 4, turn3 nobody else -> None
    # ep1: turn1 mean(1, 5) = 3, turn2 mean(2) = 2; ep2: turn1 mean(1, 3) = 2
    assert trloo_baselines(group) == [[4.0, 4.0, None], [3.0, 2.0], [2.0]]
    # advantages value - baseline, 0 where there is no baseline
    assert trloo_advantages(group) == [[-3.0, -2.0, 0.0], [0.0, 2.0], [3.0]]


def test_trloo_masked_turns_are_left_out() -> None:
    group: list[list[float | None]] = [[1.0, None], [3.0, 4.0], [None]]
    # ep0 turn1: mean(3) (ep2 masked); turn2 masked -> None
    # ep1 turn1: mean(1); turn2: ep0's turn 2 is masked -> None; ep2 masked -> None
    assert trloo_baselines(group) == [[3.0, None], [1.0, None], [None]]
    assert trloo_advantages(group) == [[-2.0, 0.0], [2.0, 0.0], [0.0]]


def test_trloo_single_episode_has_no_baseline() -> None:
    assert trloo_baselines([[1.0, 2.0]]) == [[None, None]]
    assert trloo_advantages([[1.0, 2.0]]) == [[0.0, 0.0]]
