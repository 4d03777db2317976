"""Small paired-comparison statistics for ``musaenv bench compare``. Pure Python, no numpy or scipy.

* :func:`sign_test`: exact two-sided binomial test of discordant pairs (McNemar's exact test when the pairs are
  correct/incorrect verdicts).
* :func:`paired_t`: Student's t on paired differences (here log speedup ratios): mean, confidence interval,
  two-sided p-value. The t distribution's CDF is the regularized incomplete beta function, evaluated with its
  continued fraction (Lentz's method).
* :func:`holm`: Holm's step-down adjustment, so that testing every task keeps the chance of any false
  "different" at the level asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PairedT", "holm", "paired_t", "sign_test", "t_quantile", "t_two_sided_p"]

_EPS = 1e-15
_TINY = 1e-300


def sign_test(wins_a: int, wins_b: int) -> float:
    """Two-sided exact binomial p-value of ``wins_a`` against ``wins_b`` discordant pairs (p = 1/2 each).

    Ties are not passed in: they say nothing about which side is better. No discordant pair gives p = 1.
    """
    n = wins_a + wins_b
    if n == 0:
        return 1.0
    k = min(wins_a, wins_b)
    tail = math.fsum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), for x < (a + 1) / (a + b + 2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (0.5 < p < 1), by bisection on :func:`t_two_sided_p`."""
    target = 2.0 * (1.0 - p)
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2.0
    for _ in range(64):  # far below float resolution of a quantile used for an interval
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class PairedT:
    """Student's t on paired differences.

    Attributes:
        n: Pairs.
        mean: Mean difference.
        low: Lower end of the confidence interval of the mean.
        high: Upper end.
        p_value: Two-sided p-value of "the mean difference is 0".
    """

    n: int
    mean: float
    low: float
    high: float
    p_value: float


def paired_t(diffs: Sequence[float], confidence: float = 0.95) -> PairedT | None:
    """Mean, confidence interval and p-value of paired differences (``None`` with fewer than 2 pairs).

    All differences equal: the interval is that one value, p = 1 when it is 0 and 0 otherwise (no noise at all).
    """
    n = len(diffs)
    if n < 2:
        return None
    mean = math.fsum(diffs) / n
    var = math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)
    se = math.sqrt(var / n)
    if se <= abs(mean) * 1e-12 or se == 0.0:
        return PairedT(n, mean, mean, mean, 1.0 if mean == 0.0 else 0.0)
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * se
    return PairedT(n, mean, mean - half, mean + half, t_two_sided_p(mean / se, n - 1))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values (``None`` entries, tests not run, stay ``None`` and do not count)."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(ranked)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
