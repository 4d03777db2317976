"""GRPO tensor math on tiny hand-made examples: clip bounds, k3 KL, temperature-scaled token log-probs."""

from __future__ import annotations

import math

import pytest
import torch

from musaenv.rl.grpo_loss import clipped_surrogate, grpo_token_loss, kl_k3, token_logprobs

EPS_LOW, EPS_HIGH = 0.2, 0.28
RATIOS = [1.5, 0.5, 1.1, 0.9]


def _new_logp() -> torch.Tensor:
    return torch.tensor([[math.log(r) for r in RATIOS]], requires_grad=True)


def test_positive_advantage_is_capped_at_one_plus_eps_high() -> None:
    logp_new = _new_logp()
    loss, low, high = clipped_surrogate(logp_new, torch.zeros(1, 4), torch.tensor([1.0]), EPS_LOW, EPS_HIGH)
    # A = +1: -min(r, clip(r, 0.8, 1.28)). r = 1.5 is capped (1.28); r = 0.5 keeps its own (smaller) value.
    assert loss.tolist()[0] == pytest.approx([-1.28, -0.5, -1.1, -0.9])
    assert high.tolist() == [[True, False, False, False]] and not low.any()
    loss.sum().backward()
    # d(-r A)/d log r = -r A where unclipped; 0 where the bound removed the gradient.
    assert logp_new.grad is not None
    assert logp_new.grad.tolist()[0] == pytest.approx([0.0, -0.5, -1.1, -0.9])


def test_negative_advantage_is_floored_at_one_minus_eps_low() -> None:
    logp_new = _new_logp()
    loss, low, high = clipped_surrogate(logp_new, torch.zeros(1, 4), torch.tensor([-2.0]), EPS_LOW, EPS_HIGH)
    # A = -2: -min(-2 r, -2 clip(r)) = 2 max(r, clip(r)). r = 0.5 is floored at 0.8; r = 1.5 keeps 1.5.
    assert loss.tolist()[0] == pytest.approx([3.0, 1.6, 2.2, 1.8])
    assert low.tolist() == [[False, True, False, False]] and not high.any()
    loss.sum().backward()
    assert logp_new.grad is not None
    assert logp_new.grad.tolist()[0] == pytest.approx([3.0, 0.0, 2.2, 1.8])


def test_asymmetric_bounds_differ_for_the_same_deviation() -> None:
    # r = 1.25 is inside [0.8, 1.28] (clip-higher) but would be clipped by a symmetric eps = 0.2.
    logp = torch.tensor([[math.log(1.25)]])
    _, _, high = clipped_surrogate(logp, torch.zeros(1, 1), torch.tensor([1.0]), 0.2, 0.28)
    _, _, high_sym = clipped_surrogate(logp, torch.zeros(1, 1), torch.tensor([1.0]), 0.2, 0.2)
    assert not high.any() and high_sym.all()


def test_k3_kl_values_gradient_and_unbiasedness() -> None:
    logp_new = torch.tensor([math.log(0.5), math.log(0.3)], requires_grad=True)
    logp_ref = torch.tensor([math.log(0.25), math.log(0.3)])
    kl = kl_k3(logp_new, logp_ref)
    # d = log(0.25 / 0.5) = -log 2: exp(d) - d - 1 = 0.5 + log 2 - 1; equal log-probs give exactly 0.
    assert kl.tolist() == pytest.approx([math.log(2) - 0.5, 0.0])
    kl.sum().backward()
    assert logp_new.grad is not None
    assert logp_new.grad.tolist() == pytest.approx([1 - 0.5, 0.0])  # d/d new = 1 - exp(ref - new)
    # E_{x ~ p}[k3(x)] = KL(p || q) exactly: p = [0.5, 0.5], q = [0.25, 0.75].
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75])
    expected = float((p * (p / q).log()).sum())
    assert float((p * kl_k3(p.log(), q.log())).sum()) == pytest.approx(expected)


def test_token_loss_adds_beta_times_kl() -> None:
    logp_new = torch.tensor([[math.log(1.1), math.log(0.5)]])
    logp_old = torch.zeros(1, 2)
    logp_ref = torch.tensor([[0.0, math.log(0.25)]])
    tl = grpo_token_loss(
        logp_new, logp_old, torch.tensor([1.0]), eps_low=0.2, eps_high=0.28, logp_ref=logp_ref, beta=0.1
    )
    assert tl.kl is not None
    k3 = [1 / 1.1 - math.log(1 / 1.1) - 1, 0.5 - math.log(0.5) - 1]
    assert tl.kl.tolist()[0] == pytest.approx(k3)
    assert tl.loss.tolist()[0] == pytest.approx([-1.1 + 0.1 * k3[0], -0.5 + 0.1 * k3[1]])
    assert tl.ratio.tolist()[0] == pytest.approx([1.1, 0.5])
    no_ref = grpo_token_loss(logp_new, logp_old, torch.tensor([1.0]), eps_low=0.2, eps_high=0.28)
    assert no_ref.kl is None and no_ref.loss.tolist() == no_ref.pg.tolist()


def test_token_logprobs_use_the_sampling_temperature() -> None:
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    target = torch.tensor([[1]])
    assert token_logprobs(logits, target).item() == pytest.approx(math.log(3 / 4))
    s3 = math.sqrt(3.0)  # temperature 2 halves the logits: softmax weights 1 and sqrt(3)
    assert token_logprobs(logits, target, temperature=2.0).item() == pytest.approx(math.log(s3 / (1 + s3)))
