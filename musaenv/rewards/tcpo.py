"""TCPO turn-level credit (arXiv 2608.01667): retrospective and hindsight credit. Pure Python, no torch.

Scores are first mapped affinely onto [0, 1] with the range of s(c), [-1, 1 + lambda * v_max]:
r = (s + 1) / (2 + lambda * v_max), clipped. tau is the success threshold mapped the same way. With m_k the best
prior normalised score (m_1 = 0, the bottom of the range, so turn 1's improvement is its own score):

* retrospective credit  c_k = w_imp * [r_k - m_k]_+
  + w_pres                   if m_k >= tau and r_k >= tau  (a success kept),
  - w_reg * [m_k - r_k]_+    if m_k >= tau and r_k < tau   (a success lost);
* hindsight credit      h_k = w_hind * (F_k - mean_{j != i} F_k^(j)), F_k = max_{t >= k} r_t, paid only to
  non-improving turns (r_k <= m_k) before the episode's first success; the mean runs over the other episodes of
  the same prompt that reached turn k (no such episode: h_k = 0, so a group of one has no hindsight term).

Turn reward = c_k + h_k. The paper leaves the weights and how the credits combine open; the sum and the default
weights are this library's choice. TCPO's third credit, counterfactual resampling of high-surprisal turns, needs
the policy and is not part of a reward library.
"""

from __future__ import annotations

from collections.abc import Sequence

from musaenv.errors import ConfigError
from musaenv.rewards.base import Results, RewardShaper, Scores, check_param, check_scores, register_shaper
from musaenv.rewards.score import score_range
from musaenv.types import EvalResult

__all__ = ["TCPOShaper"]


@register_shaper
class TCPOShaper(RewardShaper):
    """TCPO retrospective + hindsight turn credit (arXiv 2608.01667); group-aware, not causal.

    An env paying it online pays the lone-episode return (retrospective credit of the turns played): the hindsight
    term needs the other episodes of the prompt, so no env can pay it. A group trainer re-shapes the episodes it
    collected with :meth:`group_rewards`; an episode cut early enters the group with the turns it played.

    Args:
        improve_weight: w_imp, weight of the improvement over the best prior turn (>= 0; open, default 1.0).
        preserve_weight: w_pres, credit for keeping a success (>= 0; open, default 0.1, "small" in the paper).
        regress_weight: w_reg, weight of the drop when a success is lost (>= 0; open, default 1.0).
        hindsight_weight: w_hind, weight of the group-relative delayed credit (>= 0; open, default 0.5).
        success_threshold: Score s at which a turn counts as a success (default 1.0 = correct), inside the range.
        speedup_weight: lambda of the s(c) that produced the scores (sets the normalisation range).
        speedup_cap: v_max of that s(c).
    """

    name = "tcpo"
    causal = False
    needs_group = True

    def __init__(
        self,
        *,
        improve_weight: float = 1.0,
        preserve_weight: float = 0.1,
        regress_weight: float = 1.0,
        hindsight_weight: float = 0.5,
        success_threshold: float = 1.0,
        speedup_weight: float = 0.5,
        speedup_cap: float = 2.0,
    ) -> None:
        super().__init__()
        n = self.name
        self.improve_weight = check_param(n, "improve_weight", improve_weight, lo=0.0)
        self.preserve_weight = check_param(n, "preserve_weight", preserve_weight, lo=0.0)
        self.regress_weight = check_param(n, "regress_weight", regress_weight, lo=0.0)
        self.hindsight_weight = check_param(n, "hindsight_weight", hindsight_weight, lo=0.0)
        self.speedup_weight = check_param(n, "speedup_weight", speedup_weight, lo=0.0)
        self.speedup_cap = check_param(n, "speedup_cap", speedup_cap, lo=0.0)
        self._lo, self._hi = score_range(self.speedup_weight, self.speedup_cap)
        self.success_threshold = check_param(n, "success_threshold", success_threshold, lo=self._lo, hi=self._hi)
        self.tau = self._normalise(self.success_threshold)
        self._params = {
            "improve_weight": self.improve_weight,
            "preserve_weight": self.preserve_weight,
            "regress_weight": self.regress_weight,
            "hindsight_weight": self.hindsight_weight,
            "success_threshold": self.success_threshold,
            "speedup_weight": self.speedup_weight,
            "speedup_cap": self.speedup_cap,
        }

    def _normalise(self, score: float) -> float:
        return min(max((score - self._lo) / (self._hi - self._lo), 0.0), 1.0)

    def normalised(self, scores: Sequence[float]) -> list[float]:
        """Map scores s onto [0, 1] with the range of s(c) (values outside the range are clipped)."""
        return [self._normalise(s) for s in scores]

    def _retrospective(self, r: list[float]) -> list[float]:
        credits = []
        best_prior = 0.0
        for k, rk in enumerate(r):
            c = self.improve_weight * max(rk - best_prior, 0.0)
            if k > 0 and best_prior >= self.tau:
                c += self.preserve_weight if rk >= self.tau else -self.regress_weight * max(best_prior - rk, 0.0)
            credits.append(c)
            best_prior = max(best_prior, rk)
        return credits

    def _hindsight_turns(self, r: list[float]) -> list[bool]:
        """Which turns get hindsight credit: non-improving and before the episode's first success."""
        first_success = next((k for k, rk in enumerate(r) if rk >= self.tau), None)
        eligible = []
        best_prior = 0.0
        for k, rk in enumerate(r):
            eligible.append(first_success is not None and k < first_success and rk <= best_prior)
            best_prior = max(best_prior, rk)
        return eligible

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        # A lone episode has no peers, so no hindsight term: retrospective credit only.
        return self._retrospective(self.normalised(scores))

    def group_rewards(
        self, groups: Sequence[Scores], results: Sequence[Results | None] | None = None
    ) -> list[list[float]]:
        """Per-turn TCPO credit of G episodes of one prompt, with the group-relative hindsight term.

        ``results`` is accepted for interface compatibility and ignored (TCPO reads scores only).
        """
        if results is not None and len(results) != len(groups):
            raise ConfigError(
                f"reward shaper: expected one result list per episode ({len(groups)}), found {len(results)}."
            )
        checked = [check_scores(g) for g in groups]
        kept = [[k for k, s in enumerate(g) if s is not None] for g in checked]
        norm = [self.normalised([s for s in g if s is not None]) for g in checked]
        suffix_max = [[max(r[k:]) for k in range(len(r))] for r in norm]
        out = []
        for i, r in enumerate(norm):
            credit = self._retrospective(r)
            for k, eligible in enumerate(self._hindsight_turns(r)):
                peers = [f[k] for j, f in enumerate(suffix_max) if j != i and len(f) > k]
                if eligible and peers:
                    credit[k] += self.hindsight_weight * (suffix_max[i][k] - sum(peers) / len(peers))
            rewards = [0.0] * len(checked[i])
            for k, c in zip(kept[i], credit, strict=True):
                rewards[k] = c
            out.append(rewards)
        return out
