"""kevin, kernelgym, kernrl and tcpo against hand-computed rewards (default s(c): lambda = 0.5, v_max = 2)."""

from __future__ import annotations

import pytest

from musaenv.rewards import make_shaper
from musaenv.types import EvalResult, Stage


def _res(stage: Stage, speedup: float | None = None, passed: int = 0) -> EvalResult:
    total = 5 if stage in (Stage.CORRECT, Stage.INCORRECT) else 0
    if stage is Stage.CORRECT:
        passed = 5
    return EvalResult(stage=stage, trials_passed=passed, trials_total=total, speedup=speedup)


# ---- kevin: x = 0.3 * correct + speedup (0 if incorrect), r_k = sum_{t>=k} 0.4^(t-k) x_t


def test_kevin_from_scores() -> None:
    # x = [0, 0, 0.3 + 1.8] (1.4 -> v = 1 + 0.4 / 0.5 = 1.8); r3 = 2.1, r2 = 0.4 * 2.1 = 0.84, r1 = 0.4 * 0.84 = 0.336
    assert make_shaper("kevin").episode_rewards([-1.0, -0.2, 1.4]) == pytest.approx([0.336, 0.84, 2.1])


def test_kevin_single_turn_and_gamma() -> None:
    assert make_shaper("kevin").episode_rewards([1.0]) == pytest.approx([1.3])  # 0.3 + 1.0
    assert make_shaper("kevin").episode_rewards([-1.0]) == pytest.approx([0.0])
    assert make_shaper("kevin", gamma=0.0).episode_rewards([-1.0, 1.0]) == pytest.approx([0.0, 1.3])
    # gamma 1: r1 = 0 + 1.3, r2 = 1.3
    assert make_shaper("kevin", gamma=1.0).episode_rewards([-1.0, 1.0]) == pytest.approx([1.3, 1.3])


def test_kevin_uses_records_when_given() -> None:
    # The record says 0.5x (the score 1.0 cannot tell): x2 = 0.3 + 0.5 = 0.8; r1 = 0.4 * 0.8 = 0.32
    results = [_res(Stage.COMPILE_ERROR), _res(Stage.CORRECT, speedup=0.5)]
    assert make_shaper("kevin").episode_rewards([-1.0, 1.0], results) == pytest.approx([0.32, 0.8])
    # Uncapped speedup from the record: 0.3 + 5 = 5.3; the score 2.0 alone gives v = 3 -> 3.3
    assert make_shaper("kevin").episode_rewards([2.0], [_res(Stage.CORRECT, speedup=5.0)]) == pytest.approx([5.3])
    assert make_shaper("kevin").episode_rewards([2.0]) == pytest.approx([3.3])
    # A None record falls back to the score: 0.3 + 1.8 = 2.1
    assert make_shaper("kevin").episode_rewards([1.4], [None]) == pytest.approx([2.1])


def test_kevin_masks_infra_errors() -> None:
    # [-1, None, 1.0] -> unmasked [-1, 1.0]: x = [0, 1.3]; r = [0.4 * 1.3 = 0.52, 1.3]
    assert make_shaper("kevin").episode_rewards([-1.0, None, 1.0]) == pytest.approx([0.52, 0.0, 1.3])


# ---- kernelgym: 0.5 * correct + 0.5 * [correct and v >= 1.01]


def test_kernelgym_from_scores() -> None:
    # -1, -0.2: incorrect -> 0; 1.0: v = 1 -> 0.5; 1.4: v = 1.8 -> 1.0; 1.005: v = 1.01 exactly -> 1.0
    got = make_shaper("kernelgym").episode_rewards([-1.0, -0.2, 1.0, 1.4, 1.005])
    assert got == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.0])


def test_kernelgym_from_records() -> None:
    results = [
        _res(Stage.CORRECT, speedup=1.0099),  # 0.5
        _res(Stage.CORRECT, speedup=1.01),  # 1.0
        _res(Stage.CORRECT, speedup=None),  # untimed: 0.5
        _res(Stage.CHEATING, speedup=3.0),  # 0
        _res(Stage.INCORRECT, passed=4),  # 0
    ]
    scores = [1.0, 1.005, 1.0, -1.0, -0.1]
    assert make_shaper("kernelgym").episode_rewards(scores, results) == pytest.approx([0.5, 1.0, 0.5, 0.0, 0.0])


# ---- kernrl: -0.5 build failure, -0.25 incorrect, 0.5 (v - 1) if slower, min(v - 1, 2) if faster


def test_kernrl_from_scores() -> None:
    # -1 -> build failure -0.5; -0.2 -> -0.25; 1.0 -> v = 1 -> 0; 1.4 -> v = 1.8 -> 0.8; 2.0 -> v = 3 -> min(2, 2)
    got = make_shaper("kernrl").episode_rewards([-1.0, -0.2, 1.0, 1.4, 2.0])
    assert got == pytest.approx([-0.5, -0.25, 0.0, 0.8, 2.0])


def test_kernrl_from_records() -> None:
    cases = [
        (_res(Stage.COMPILE_ERROR), -1.0, -0.5),
        (_res(Stage.FORMAT_ERROR), -1.0, -0.5),
        (_res(Stage.CHEATING, speedup=5.0), -1.0, -0.5),
        (_res(Stage.RUNTIME_ERROR), -1.0, -0.25),  # the score alone would say -0.5
        (_res(Stage.TIMEOUT), -1.0, -0.25),
        (_res(Stage.INCORRECT, passed=2), -0.3, -0.25),
        (_res(Stage.CORRECT, speedup=0.6), 1.0, -0.2),  # 0.5 * (0.6 - 1)
        (_res(Stage.CORRECT, speedup=2.5), 1.75, 1.5),  # min(1.5, 2)
        (_res(Stage.CORRECT, speedup=4.0), 2.0, 2.0),  # min(3, 2)
        (_res(Stage.CORRECT, speedup=None), 1.0, 0.0),
    ]
    results = [c[0] for c in cases]
    scores = [c[1] for c in cases]
    assert make_shaper("kernrl").episode_rewards(scores, results) == pytest.approx([c[2] for c in cases])


def test_kernrl_derivation_follows_lambda_and_cap() -> None:
    # lambda 1, v_max 4: 3.5 -> v = 3.5 -> min(2.5, 2) = 2; 2.0 -> v = 2 -> 1.0
    shaper = make_shaper("kernrl", speedup_weight=1.0, speedup_cap=4.0)
    assert shaper.episode_rewards([3.5, 2.0]) == pytest.approx([2.0, 1.0])


# ---- tcpo: r = (s + 1) / 3, tau = 2/3; m_1 = 0; weights imp 1, pres 0.1, reg 1, hind 0.5


def test_tcpo_retrospective_single_episode() -> None:
    tcpo = make_shaper("tcpo")
    # r = [0, 0.8/3, 2.4/3]: improvements 0, 0.8/3, 1.6/3
    assert tcpo.episode_rewards([-1.0, -0.2, 1.4]) == pytest.approx([0.0, 0.8 / 3, 1.6 / 3])
    # success kept: r = [2/3, 0.8]: 2/3, then (0.8 - 2/3) + 0.1
    assert tcpo.episode_rewards([1.0, 1.4]) == pytest.approx([2 / 3, 0.8 - 2 / 3 + 0.1])
    # success kept but slower: 0.8, then 0 + 0.1
    assert tcpo.episode_rewards([1.4, 1.0]) == pytest.approx([0.8, 0.1])
    # success lost: 0.8, then -(0.8 - 0.8/3)
    assert tcpo.episode_rewards([1.4, -0.2]) == pytest.approx([0.8, -(0.8 - 0.8 / 3)])
    assert tcpo.episode_rewards([1.0]) == pytest.approx([2 / 3])  # single-turn early success
    assert tcpo.episode_rewards([-1.0]) == pytest.approx([0.0])


def test_tcpo_group_hindsight_credit() -> None:
    groups = [[-1.0, 1.0], [-1.0, -1.0, -1.0], [1.0]]
    # F (suffix max of r): A [2/3, 2/3], B [0, 0, 0], C [2/3].
    # A turn 1 is non-improving before success: 0.5 * (2/3 - mean(0, 2/3)) = 1/6; turn 2 improves by 2/3.
    # B never succeeds, C succeeds at once: no hindsight for either.
    got = make_shaper("tcpo").group_rewards(groups)
    assert got[0] == pytest.approx([1 / 6, 2 / 3])
    assert got[1] == pytest.approx([0.0, 0.0, 0.0])
    assert got[2] == pytest.approx([2 / 3])
    # Alone, A has no peers and so no hindsight term.
    assert make_shaper("tcpo").episode_rewards([-1.0, 1.0]) == pytest.approx([0.0, 2 / 3])


def test_tcpo_all_failed_group_and_masking() -> None:
    tcpo = make_shaper("tcpo")
    # all failed: improvement only, r of -0.2 = 0.8/3
    first, second = tcpo.group_rewards([[-1.0, -1.0], [-1.0, -0.2]])
    assert first == pytest.approx([0.0, 0.0])
    assert second == pytest.approx([0.0, 0.8 / 3])
    # masked turn dropped: [None, -1, 1] is [-1, 1]; hindsight 0.5 * (2/3 - 0) = 1/3 on raw turn 2
    first, second = tcpo.group_rewards([[None, -1.0, 1.0], [-1.0, -1.0]])
    assert first == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert second == pytest.approx([0.0, 0.0])
