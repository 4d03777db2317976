"""Shapers built on the MusaCoder score alone: ``primeecho``, ``best``, ``last``, ``per_turn``, ``delta``.

All of them take the per-turn scores s_k of :func:`musaenv.rewards.score.candidate_score` as they are. Masked turns
(``None``) are dropped before the rule runs (see :mod:`musaenv.rewards.base`), so "turn 1" below is the first
unmasked turn.
"""

from __future__ import annotations

from musaenv.errors import ConfigError
from musaenv.rewards.base import RewardShaper, Scores, check_param, check_scores, register_shaper
from musaenv.types import EvalResult

__all__ = ["BestShaper", "DeltaShaper", "LastShaper", "PerTurnShaper", "PrimeEchoShaper"]


class _FirstTurnAnchored(RewardShaper):
    """Episode reward placed on turn 1, the only turn trained (MusaCoder trains on the first turn's tokens)."""

    causal = False

    def loss_weights(self, scores: Scores) -> list[float]:
        """1 on the first unmasked turn, 0 elsewhere (all 0 when every turn is masked)."""
        checked = check_scores(scores)
        weights = [0.0] * len(checked)
        for k, s in enumerate(checked):
            if s is not None:
                weights[k] = 1.0
                break
        return weights


@register_shaper
class PrimeEchoShaper(_FirstTurnAnchored):
    """PrimeEcho, MusaCoder's first-turn-anchored episode reward (arXiv 2606.04847, eq. 9).

    R = alpha * s_1 + (1 - alpha) * max_k s_k + b_early, where b_early = ``bonus_turn1`` if turn 1 succeeds,
    ``bonus_turn2`` if turn 1 fails and turn 2 succeeds, else 0. A turn succeeds when s >= ``success_threshold``
    (default 1.0: the candidate is correct). The anchor on s_1 is what makes "fail on purpose at turn 1, fix at
    turn 2" worse than succeeding at once; a pure best-of-turns reward (``best``) pays both the same.

    R's credit sits on turn 1, the turn the paper trains; later turns get credit 0 and loss weight 0. If turn 1 is
    masked (infra error), the first unmasked turn takes its role (its tokens are the trained ones), and "turn 2" is
    the next unmasked turn.

    An env pays it online: R_t = alpha * s_1 + (1 - alpha) * max_{k<=t} s_k + b_early(t) is the return of turns
    1..t, and step t pays R_t - R_{t-1} (>= 0 after turn 1: R_t never falls). An episode cut after a failed
    turn 1 (``TimeLimit``, a closed session) returns R_1 = s_1, no more than any episode with that first turn; a
    ``format_error`` episode returns -1, the least any episode can.

    Args:
        alpha: Weight of the first turn's score, in [0, 1]. 0.75 is the paper's value.
        bonus_turn1: B1 > bonus_turn2. Open in the paper; 0.2 is this library's choice.
        bonus_turn2: B2 > 0. Open in the paper; 0.1 is this library's choice.
        success_threshold: Score at which a turn counts as a success (1.0 = correct at any speed).
    """

    name = "primeecho"

    def __init__(
        self,
        *,
        alpha: float = 0.75,
        bonus_turn1: float = 0.2,
        bonus_turn2: float = 0.1,
        success_threshold: float = 1.0,
    ) -> None:
        super().__init__()
        self.alpha = check_param(self.name, "alpha", alpha, lo=0.0, hi=1.0)
        self.bonus_turn1 = check_param(self.name, "bonus_turn1", bonus_turn1, lo=0.0, lo_open=True)
        self.bonus_turn2 = check_param(self.name, "bonus_turn2", bonus_turn2, lo=0.0, lo_open=True)
        if not self.bonus_turn1 > self.bonus_turn2:
            raise ConfigError(
                f"reward shaper 'primeecho': expected bonus_turn1 > bonus_turn2 > 0 (MusaCoder eq. 9), found "
                f"bonus_turn1={self.bonus_turn1!r}, bonus_turn2={self.bonus_turn2!r}."
            )
        self.success_threshold = check_param(self.name, "success_threshold", success_threshold)
        self._params = {
            "alpha": self.alpha,
            "bonus_turn1": self.bonus_turn1,
            "bonus_turn2": self.bonus_turn2,
            "success_threshold": self.success_threshold,
        }

    def _early_bonus(self, scores: list[float]) -> float:
        if scores[0] >= self.success_threshold:
            return self.bonus_turn1
        if len(scores) > 1 and scores[1] >= self.success_threshold:
            return self.bonus_turn2
        return 0.0

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        episode = self.alpha * scores[0] + (1.0 - self.alpha) * max(scores) + self._early_bonus(scores)
        return [episode] + [0.0] * (len(scores) - 1)


@register_shaper
class BestShaper(_FirstTurnAnchored):
    """Best-of-turns: R = max_k s_k, credited to turn 1 like PrimeEcho (PrimeEcho with alpha = 0 and no bonus).

    The baseline that MusaCoder's PrimeEcho ablation replaces (arXiv 2606.04847, sec. on eq. 9): it pays
    "fail at turn 1, fix at turn 2" as much as "succeed at turn 1", which invites deliberate first-turn failures.
    Same loss weights as ``primeecho`` (first turn only), so the two differ only in the reward.
    """

    name = "best"

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        return [max(scores)] + [0.0] * (len(scores) - 1)


@register_shaper
class LastShaper(RewardShaper):
    """Final-turn reward: R = s_T, credited to the last turn; every turn is trained.

    The common outcome reward of multi-turn agents: only where the episode ends counts. Paid online, step t pays
    s_t - s_{t-1} (as ``delta``), so an episode cut at turn t returns s_t.
    """

    name = "last"
    causal = False

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        return [0.0] * (len(scores) - 1) + [scores[-1]]


@register_shaper
class PerTurnShaper(RewardShaper):
    """Each turn earns its own score: r_k = s_k (return = sum_k s_k). Causal; every turn is trained.

    The plain turn-level reward; note that it pays longer episodes more in total, which a trainer may offset
    with a discount on returns-to-go.
    """

    name = "per_turn"
    causal = True

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        return list(scores)


@register_shaper
class DeltaShaper(RewardShaper):
    """Improvement reward: r_1 = s_1, r_k = s_k - s_{k-1} (return = s_T). Causal; every turn is trained.

    Potential-based shaping with the score as potential: each turn is paid what it added, so the return equals the
    final score and a regression is penalised at the turn that made it.
    """

    name = "delta"
    causal = True

    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        return [scores[0]] + [scores[k] - scores[k - 1] for k in range(1, len(scores))]
