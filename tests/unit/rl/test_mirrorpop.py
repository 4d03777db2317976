"""MirrorPop against hand-computed cases, on lists and on masked tensors."""

from __future__ import annotations

import pytest
import torch

from musaenv.rl.mirrorpop import DEFAULT_DELTA, mirrorpop_filter

# Per-sequence log-ratios log rho_t (new - old), chosen to be exact in binary floating point:
#   A: [+0.5, -0.5]    mean |.| = 0.5,    |mean| = 0     (opposite deviations: cancel under the signed rule only)
#   B: [0.125, 0.125]  mean |.| = 0.125,  |mean| = 0.125
#   C: [0.5, 0.25]     mean |.| = 0.375,  |mean| = 0.375
OLD = [[-1.0, -2.0], [-1.0, -1.0], [-3.0, -1.0]]
NEW = [[-0.5, -2.5], [-0.875, -0.875], [-2.5, -0.75]]


def test_mirrorpop_drops_opposite_deviations_that_the_signed_rule_keeps() -> None:
    mp = mirrorpop_filter(NEW, OLD, delta=0.25)
    signed = mirrorpop_filter(NEW, OLD, delta=0.25, rule="signed")
    assert mp.deviation == [0.5, 0.125, 0.375]
    assert signed.deviation == [0.0, 0.125, 0.375]
    assert mp.keep == [False, True, False]
    assert signed.keep == [True, True, False]
    assert mp.dropped_fraction == pytest.approx(2 / 3)
    assert signed.dropped_fraction == pytest.approx(1 / 3)
    assert (mp.n_kept, mp.n_total, mp.max_deviation) == (1, 3, 0.5)


def test_threshold_is_inclusive() -> None:
    assert mirrorpop_filter(NEW, OLD, delta=0.5).keep == [True, True, True]
    assert mirrorpop_filter(NEW, OLD, delta=0.375).keep == [False, True, True]


def test_tensor_path_ignores_masked_padding_and_matches_the_list_path() -> None:
    # Same three sequences padded to 3 tokens; the padding holds a huge log-ratio that must not count.
    old = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, 0.0], [-3.0, -1.0, 0.0]])
    new = torch.tensor([[-0.5, -2.5, 9.0], [-0.875, -0.875, -9.0], [-2.5, -0.75, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0]])
    mp = mirrorpop_filter(new, old, mask, delta=0.25)
    assert mp.keep.dtype == torch.bool
    assert mp.keep.tolist() == [False, True, False]
    assert mp.deviation.tolist() == [0.5, 0.125, 0.375]
    signed = mirrorpop_filter(new, old, mask.bool(), delta=0.25, rule="signed")
    assert signed.keep.tolist() == [True, True, False]
    assert mp.stats()["mirrorpop/dropped_fraction"] == pytest.approx(2 / 3)


def test_variable_length_sequences_average_over_their_own_tokens() -> None:
    # One token of |log rho| 0.75 alone averages to 0.75; followed by two exact tokens it averages to 0.25.
    old = torch.zeros(2, 3)
    new = torch.tensor([[0.75, 0.0, 0.0], [0.75, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    res = mirrorpop_filter(new, old, mask, delta=0.5)
    assert res.deviation.tolist() == [0.75, 0.25]
    assert res.keep.tolist() == [False, True]


def test_empty_sequences_are_kept_and_gradients_are_not_touched() -> None:
    res = mirrorpop_filter([[], [0.0]], [[], [0.0]])
    assert res.keep == [True, True] and res.deviation == [0.0, 0.0]
    new = torch.tensor([[0.3, 0.1]], requires_grad=True)
    out = mirrorpop_filter(new, torch.zeros(1, 2), torch.zeros(1, 2))
    assert out.keep.tolist() == [True] and not out.deviation.requires_grad
    empty = mirrorpop_filter([], [])
    assert (empty.n_total, empty.dropped_fraction) == (0, 0.0)


def test_default_delta_and_bad_arguments() -> None:
    assert DEFAULT_DELTA == 0.1
    assert mirrorpop_filter([[0.05, -0.05]], [[0.0, 0.0]]).keep == [True]
    assert mirrorpop_filter([[0.15, -0.15]], [[0.0, 0.0]]).keep == [False]
    with pytest.raises(ValueError, match="rule"):
        mirrorpop_filter(NEW, OLD, rule="geometric")
    with pytest.raises(ValueError, match="delta"):
        mirrorpop_filter(NEW, OLD, delta=-0.1)
    with pytest.raises(ValueError, match="mask"):
        mirrorpop_filter(NEW, OLD, [[1, 1]] * 3)
    with pytest.raises(ValueError, match="equal-length"):
        mirrorpop_filter([[0.0, 0.0]], [[0.0]])
