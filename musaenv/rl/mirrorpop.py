"""MirrorPop: MusaCoder's off-policy sequence filter (arXiv 2606.04847; see docs REFERENCES.md).

For a sampled response y with per-token importance ratios rho_t = pi_theta(y_t | .) / pi_old(y_t | .), MirrorPop keeps
the response only when the *mean absolute* log-ratio is small::

    keep(y)  <=>  (1/T) * sum_t |log rho_t| <= delta          (rule="mirrorpop")

The usual sequence rule bounds the *signed* mean instead, ``|(1/T) sum_t log rho_t| <= delta`` (rule="signed"),
which is the log of the geometric-mean ratio: a response whose tokens drifted far in opposite directions (some much
likelier now, some much less likely) averages to ~0 and is kept. MirrorPop's absolute value makes such deviations
add up instead of cancel, so it also drops them.

delta is open in the paper. The default :data:`DEFAULT_DELTA` = 0.1 is a choice, argued from the clip range: with the
usual PPO/GRPO clip eps = 0.2 a token's ratio stops contributing outside [0.8, 1.2] (DAPO's eps_high = 0.28 widens
the top to 1.28), i.e. beyond |log rho| of about 0.18 to 0.25. Requiring the *average* token of a kept response to
sit within 0.1, about half that distance, keeps only responses that are on the whole well inside the trust region,
while a single token near the clip edge does not veto a long response. It is a knob; tune it against the dropped
fraction this module reports (a filter that drops most of a batch wastes the samples).

Works on torch tensors (``batch x tokens`` log-probabilities with a 0/1 mask) and on plain ragged lists; torch is
never imported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

__all__ = ["DEFAULT_DELTA", "RULES", "FilterResult", "mirrorpop_filter", "sequence_deviation"]

DEFAULT_DELTA = 0.1
"""Default threshold on the per-sequence mean |log rho| (open in MusaCoder; see the module docstring)."""

Rule = Literal["mirrorpop", "signed"]
RULES: tuple[str, ...] = ("mirrorpop", "signed")


@dataclass(frozen=True)
class FilterResult:
    """What :func:`mirrorpop_filter` decided.

    Attributes:
        keep: One boolean per sequence: a ``torch.bool`` tensor of shape ``(batch,)`` for tensor inputs, a list of
            ``bool`` for list inputs.
        deviation: The per-sequence statistic compared with ``delta`` (mean |log rho| for ``"mirrorpop"``,
            |mean log rho| for ``"signed"``), same container kind as ``keep``. Sequences without tokens have 0.
        n_total: Number of sequences.
        n_kept: Number of sequences kept.
        dropped_fraction: ``1 - n_kept / n_total`` (0 for an empty batch).
        max_deviation: Largest ``deviation`` (0 for an empty batch).
        delta: The threshold used.
        rule: The rule used.
    """

    keep: Any
    deviation: Any
    n_total: int
    n_kept: int
    dropped_fraction: float
    max_deviation: float
    delta: float
    rule: str

    def stats(self, prefix: str = "mirrorpop/") -> dict[str, float]:
        """Scalar metrics for logging: dropped fraction, kept count, max deviation."""
        return {
            f"{prefix}dropped_fraction": self.dropped_fraction,
            f"{prefix}n_kept": float(self.n_kept),
            f"{prefix}n_total": float(self.n_total),
            f"{prefix}max_deviation": self.max_deviation,
        }


def _check(delta: float, rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"mirrorpop_filter: expected rule in {RULES}, found {rule!r}.")
    if not (delta >= 0.0 and math.isfinite(delta)):
        raise ValueError(f"mirrorpop_filter: expected a finite delta >= 0, found {delta!r}.")


def _deviation_list(new: Sequence[float], old: Sequence[float], rule: str) -> float:
    if len(new) != len(old):
        raise ValueError(
            f"mirrorpop_filter: expected equal-length log-prob sequences, found {len(new)} new and {len(old)} old."
        )
    if not new:
        return 0.0
    diffs = [float(a) - float(b) for a, b in zip(new, old)]
    if rule == "mirrorpop":
        return sum(abs(d) for d in diffs) / len(diffs)
    return abs(sum(diffs) / len(diffs))


def sequence_deviation(
    logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor | None = None, rule: str = "mirrorpop"
) -> torch.Tensor:
    """Per-sequence deviation of a ``(batch, tokens)`` log-prob pair, masked; shape ``(batch,)``.

    Args:
        logp_new: Log-probabilities under the current policy pi_theta.
        logp_old: Log-probabilities under the sampling policy pi_old.
        mask: 1 for real response tokens, 0 for padding; ``None`` means all real.
        rule: ``"mirrorpop"`` (mean |log rho|) or ``"signed"`` (|mean log rho|).

    Returns:
        A float tensor; rows without any real token get 0. No gradient flows through it.
    """
    _check(0.0, rule)
    log_rho = (logp_new - logp_old).detach().float()
    m = log_rho.new_ones(log_rho.shape) if mask is None else mask.detach().to(log_rho.dtype)
    count = m.sum(dim=-1).clamp(min=1.0)
    if rule == "mirrorpop":
        return (log_rho.abs() * m).sum(dim=-1) / count
    return ((log_rho * m).sum(dim=-1) / count).abs()


def mirrorpop_filter(
    logp_new: Any,
    logp_old: Any,
    mask: Any = None,
    *,
    delta: float = DEFAULT_DELTA,
    rule: Rule | str = "mirrorpop",
) -> FilterResult:
    """Decide which sampled responses are close enough to the current policy to train on.

    Args:
        logp_new: Per-token log-probabilities under pi_theta: a ``(batch, tokens)`` tensor, or a sequence of
            per-sequence float sequences (ragged allowed).
        logp_old: Same under the sampling policy pi_old, same shape.
        mask: For tensors, a ``(batch, tokens)`` 0/1 (or bool) tensor marking real tokens; ``None`` means all real.
            Must be ``None`` for lists (their lengths already say which tokens are real).
        delta: Keep a sequence iff its deviation is ``<= delta``.
        rule: ``"mirrorpop"`` (mean |log rho|, MusaCoder) or ``"signed"`` (|mean log rho|, for comparison).

    Returns:
        A :class:`FilterResult` with the keep mask and statistics.
    """
    _check(delta, rule)
    if hasattr(logp_new, "detach"):
        dev_t = sequence_deviation(logp_new, logp_old, mask, rule)
        keep_t = dev_t <= delta
        n_total = int(dev_t.numel())
        n_kept = int(keep_t.sum().item())
        max_dev = float(dev_t.max().item()) if n_total else 0.0
        return FilterResult(keep_t, dev_t, n_total, n_kept, _dropped(n_total, n_kept), max_dev, delta, rule)
    if mask is not None:
        raise ValueError("mirrorpop_filter: mask applies to tensors only; pass ragged lists without padding instead.")
    if len(logp_new) != len(logp_old):
        raise ValueError(
            f"mirrorpop_filter: expected as many old sequences as new, found {len(logp_old)} and {len(logp_new)}."
        )
    devs = [_deviation_list(a, b, rule) for a, b in zip(logp_new, logp_old)]
    keep = [d <= delta for d in devs]
    n_kept = sum(keep)
    return FilterResult(keep, devs, len(devs), n_kept, _dropped(len(devs), n_kept), max(devs, default=0.0), delta, rule)


def _dropped(n_total: int, n_kept: int) -> float:
    return 0.0 if n_total == 0 else 1.0 - n_kept / n_total
