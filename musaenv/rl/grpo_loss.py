"""The tensor math of GRPO, separate from any model: token log-probs, the clipped surrogate, the k3 KL estimator.

Shapes: ``(batch, tokens)`` for per-token quantities, ``(batch,)`` for per-sequence ones. Sources:

* clipped surrogate: PPO (Schulman et al. 2017, eq. 7) with asymmetric bounds ``[1 - eps_low, 1 + eps_high]``
  (DAPO "clip-higher", arXiv 2503.14476: eps_low = 0.2, eps_high = 0.28);
* KL penalty: the k3 estimator ``exp(q - p) - (q - p) - 1`` of KL(pi_theta || pi_ref) with p = log pi_theta and
  q = log pi_ref (Schulman, "Approximating KL divergence", 2020), as GRPO uses it (DeepSeekMath, arXiv 2402.03300,
  eq. 4); it is unbiased, non-negative per token, and 0 iff the two log-probs agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["TokenLoss", "clipped_surrogate", "grpo_token_loss", "kl_k3", "token_logprobs"]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each target token under ``softmax(logits / temperature)``.

    Args:
        logits: ``(batch, tokens, vocab)`` next-token logits, aligned with ``targets``.
        targets: ``(batch, tokens)`` token ids.
        temperature: The sampling temperature (log-probs must be those of the distribution that was sampled).

    Returns:
        ``(batch, tokens)`` float32 log-probabilities.
    """
    scaled = logits.float() / temperature
    picked = scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    # logsumexp instead of a full log_softmax: one (batch, tokens) result, no second vocab-sized tensor.
    return picked - torch.logsumexp(scaled, dim=-1)


def clipped_surrogate(
    logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped policy-gradient loss ``-min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)``.

    Args:
        logp_new: ``(batch, tokens)`` log-probs under pi_theta (with gradient).
        logp_old: ``(batch, tokens)`` log-probs under the sampling policy (no gradient needed).
        advantages: ``(batch,)`` per-sequence advantages (broadcast over tokens) or ``(batch, tokens)``.
        eps_low: Lower clip distance: the ratio is floored at ``1 - eps_low`` (active when A < 0).
        eps_high: Upper clip distance: the ratio is capped at ``1 + eps_high`` (active when A > 0).

    Returns:
        ``(loss, clipped_low, clipped_high)``: the per-token loss and boolean masks of the tokens whose gradient the
        lower / upper bound removed.
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    ratio = torch.exp(logp_new - logp_old.detach())
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        clipped_low = (adv < 0) & (ratio < 1.0 - eps_low)
        clipped_high = (adv > 0) & (ratio > 1.0 + eps_high)
    return loss, clipped_low, clipped_high


def kl_k3(logp_new: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref): ``exp(ref - new) - (ref - new) - 1`` (>= 0)."""
    d = logp_ref.detach() - logp_new
    return torch.exp(d) - d - 1.0


@dataclass
class TokenLoss:
    """Per-token GRPO loss and its parts.

    Attributes:
        loss: ``(batch, tokens)`` total per-token loss (surrogate + beta * KL).
        pg: ``(batch, tokens)`` clipped surrogate part.
        kl: ``(batch, tokens)`` k3 KL, or ``None`` without a reference.
        ratio: ``(batch, tokens)`` importance ratio pi_theta / pi_old (detached).
        clipped_low: ``(batch, tokens)`` bool, gradient removed by the lower clip bound.
        clipped_high: ``(batch, tokens)`` bool, gradient removed by the upper clip bound.
    """

    loss: torch.Tensor
    pg: torch.Tensor
    kl: torch.Tensor | None
    ratio: torch.Tensor
    clipped_low: torch.Tensor
    clipped_high: torch.Tensor


def grpo_token_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    logp_ref: torch.Tensor | None = None,
    beta: float = 0.0,
) -> TokenLoss:
    """GRPO's per-token loss: clipped surrogate plus ``beta`` times the k3 KL to a reference (when given).

    Aggregation (masking, loss weights, the token-level mean) is the caller's job: see
    :meth:`musaenv.rl.grpo.GRPOTrainer.update`.
    """
    pg, low, high = clipped_surrogate(logp_new, logp_old, advantages, eps_low, eps_high)
    kl = kl_k3(logp_new, logp_ref) if logp_ref is not None else None
    loss = pg if kl is None or beta == 0.0 else pg + beta * kl
    ratio = torch.exp(logp_new.detach() - logp_old.detach())
    return TokenLoss(loss, pg, kl, ratio, low, high)
