"""Compare candidate outputs with reference outputs, in the parent process, with numpy.

NaN or Inf where the reference is finite is a mismatch (HACKS S21: NaN as a wildcard); where the reference
itself is non-finite the candidate must match it exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "TrialComparison",
    "bits_equal",
    "compare_outputs",
    "compare_stressed",
    "fingerprints_agree",
    "trivial_output_passes",
]


@dataclass(frozen=True)
class TrialComparison:
    """Verdict of one correctness trial.

    Attributes:
        passed: All outputs within tolerance.
        max_abs_error: Worst absolute error over finite reference positions (``None`` if nothing compared).
        max_rel_error: Worst relative error over the same positions.
        reason: Why it failed (shape, dtype, count, non-finite, tolerance), else ``""``.
    """

    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    reason: str = ""


_CHUNK = 1 << 16  # elements per step: the temporaries stay in cache (about 3x faster on 8 MB outputs)
_NARROW = (np.dtype(np.float16), np.dtype(np.float32))  # compared in float32, as torch.allclose does for them


@dataclass
class _Tally:
    lost_nonfinite: bool = False  # a NaN/Inf of the reference not reproduced exactly
    n_nonfinite: int = 0  # NaN/Inf in the candidate where the reference is finite
    n_finite: int = 0  # positions where the reference is finite
    n_bad: int = 0  # of those, outside the tolerance
    max_abs: float = 0.0
    max_rel: float = 0.0


def _chunks(a: np.ndarray, dtype: type[np.floating] = np.float64) -> Iterator[np.ndarray]:
    """``a`` flattened, in ``dtype``, as pieces of ``_CHUNK`` elements (views where ``a`` has that dtype)."""
    flat = a.reshape(-1)
    for lo in range(0, flat.size, _CHUNK):
        yield flat[lo : lo + _CHUNK].astype(dtype, copy=False)


def _work_dtype(c: np.ndarray, r: np.ndarray) -> type[np.floating]:
    """float32 when both sides are float32 or float16: the arithmetic of the comparison rounds at 2^-24 relative,
    far below any tolerance, and no float64 copy of either output is made (the parent compares ~14 outputs per
    evaluation); float64 for everything else (float64, integers, a mix)."""
    return np.float32 if c.dtype in _NARROW and r.dtype in _NARROW else np.float64


def _tally(c: np.ndarray, r: np.ndarray, atol: float, rtol: float) -> _Tally:
    """One output pair, chunk by chunk (in :func:`_work_dtype`)."""
    t = _Tally()
    work = _work_dtype(c, r)
    with np.errstate(over="ignore"):  # float32: a huge error or error/|r| is inf, still outside any tolerance
        for cw, rw in zip(_chunks(c, work), _chunks(r, work)):
            _tally_chunk(t, cw, rw, atol, rtol)
    return t


def _tally_chunk(t: _Tally, cw: np.ndarray, rw: np.ndarray, atol: float, rtol: float) -> None:
    finite = np.isfinite(rw)
    if not finite.all():
        if not np.array_equal(cw[~finite], rw[~finite], equal_nan=True):
            t.lost_nonfinite = True
        cw, rw = cw[finite], rw[finite]
    t.n_finite += rw.size
    c_ok = np.isfinite(cw)
    if not c_ok.all():
        t.n_nonfinite += int(np.count_nonzero(~c_ok))
        return
    if rw.size == 0:
        return
    err = np.abs(cw - rw)
    abs_r = np.abs(rw)
    t.max_abs = max(t.max_abs, float(err.max()))
    t.max_rel = max(t.max_rel, float((err / np.maximum(abs_r, 1e-12)).max()))
    t.n_bad += int(np.count_nonzero(err > atol + rtol * abs_r))


def compare_outputs(
    cand: Sequence[np.ndarray],
    ref: Sequence[np.ndarray],
    atol: float,
    rtol: float,
    cand_dtypes: Sequence[str] | None = None,
    ref_dtypes: Sequence[str] | None = None,
) -> TrialComparison:
    """Compare one trial's outputs (``|c - r| <= atol + rtol * |r|`` elementwise, like torch.allclose)."""
    if len(cand) != len(ref):
        return TrialComparison(False, reason=f"expected {len(ref)} output(s), got {len(cand)}")
    worst_abs = 0.0
    worst_rel = 0.0
    for i, (c, r) in enumerate(zip(cand, ref)):
        if c.shape != r.shape:
            return TrialComparison(False, reason=f"output {i}: expected shape {list(r.shape)}, got {list(c.shape)}")
        if cand_dtypes is not None and ref_dtypes is not None and cand_dtypes[i] != ref_dtypes[i]:
            return TrialComparison(False, reason=f"output {i}: expected dtype {ref_dtypes[i]}, got {cand_dtypes[i]}")
        t = _tally(c, r, atol, rtol)
        if t.lost_nonfinite:
            return TrialComparison(False, reason=f"output {i}: non-finite reference values not reproduced")
        if t.n_nonfinite:
            n = t.n_nonfinite
            return TrialComparison(False, reason=f"output {i}: {n} NaN/Inf value(s) where the reference is finite")
        if t.n_finite == 0:
            continue
        worst_abs, worst_rel = max(worst_abs, t.max_abs), max(worst_rel, t.max_rel)
        if t.n_bad:
            return TrialComparison(
                False,
                worst_abs,
                worst_rel,
                f"output {i}: {t.n_bad} of {t.n_finite} values outside atol={atol:g}, rtol={rtol:g} "
                f"(max abs error {t.max_abs:.3g})",
            )
    return TrialComparison(True, worst_abs, worst_rel)


# A stress trial (inputs scaled 50-100x) scales the rounding error of every output that is a sum of large terms
# while its value stays small, so an honest kernel summing in another order than torch can miss the task's tolerance
# at a few such elements: l3_attention's shipped kernel failed 1 of 13,320 values at 2.4x the tolerance once in a
# CI run. What stress trials are for fails grossly (NaN from exp without the max subtracted; a one-pass variance off
# by 1.7 at a mean of 1000): a failure counts when any value is off by more than STRESS_SLACK times the tolerance,
# or more than STRESS_OUTLIERS of them (and more than one) miss it.
STRESS_SLACK = 10.0
STRESS_OUTLIERS = 1e-3


def compare_stressed(
    cand: Sequence[np.ndarray],
    ref: Sequence[np.ndarray],
    atol: float,
    rtol: float,
    cand_dtypes: Sequence[str] | None = None,
    ref_dtypes: Sequence[str] | None = None,
) -> TrialComparison:
    """:func:`compare_outputs` for a stress trial: a miss of rounding size at a few values is not a failure."""
    cmp = compare_outputs(cand, ref, atol, rtol, cand_dtypes, ref_dtypes)
    if cmp.passed or not compare_outputs(cand, ref, STRESS_SLACK * atol, STRESS_SLACK * rtol).passed:
        return cmp
    tallies = [_tally(c, r, atol, rtol) for c, r in zip(cand, ref)]
    bad, finite = sum(t.n_bad for t in tallies), sum(t.n_finite for t in tallies)
    if bad > max(1.0, STRESS_OUTLIERS * finite):
        return cmp
    return TrialComparison(True, cmp.max_abs_error, cmp.max_rel_error)


def _finite_chunks(r: np.ndarray) -> Iterator[np.ndarray]:
    for c in _chunks(r):
        yield c[np.isfinite(c)]


def _constant_passes(r: np.ndarray, const: float, atol: float, rtol: float) -> bool:
    # Chunked, so a real task (where zeros fail almost everywhere) is answered from its first chunk.
    return all(np.all(np.abs(c - const) <= atol + rtol * np.abs(c)) for c in _finite_chunks(r))


def trivial_output_passes(ref: Sequence[np.ndarray], atol: float, rtol: float) -> bool:
    """Would an all-zeros or a constant (the mean) output pass this trial? (HACKS S6: a degenerate test.)"""
    for r in ref:
        if not _constant_passes(r, 0.0, atol, rtol):
            return False
        total, count = 0.0, 0
        for c in _finite_chunks(r):
            total, count = total + float(c.sum()), count + c.size
        if count and not _constant_passes(r, total / count, atol, rtol):
            return False
    return True


def _consistent(fp: object, stats: Sequence[float], atol: float, rtol: float) -> bool:
    """Could a candidate output with fingerprint ``fp`` (``[sum, sum of squares]``) be within tolerance of a
    reference output whose ``stats`` are ``[sum r, sum r^2, sum |r|, n]``?

    Elementwise ``|c - r| <= e`` with ``e = atol + rtol * |r|`` implies ``|sum c - sum r| <= sum e`` and
    ``|sum c^2 - sum r^2| <= sum (2 |r| e + e^2)``; both right-hand sides follow from the four stats, so an honest
    output always passes while zeros, a stale or a shifted output fail unless they happen to keep both sums. A
    slack of 1e-5 relative covers float32 accumulation on either side. A reference with NaN/Inf is left to the
    trials (True).
    """
    try:
        s_c, q_c = float(fp[0]), float(fp[1])  # type: ignore[index]
        s_r, q_r, a_r, n = (float(v) for v in stats[:4])
    except (TypeError, ValueError, IndexError, KeyError):
        return False
    if not all(math.isfinite(v) for v in (s_r, q_r, a_r, n)):
        return True
    if not (math.isfinite(s_c) and math.isfinite(q_c)):
        return False
    sum_e = n * atol + rtol * a_r
    sum_q = 2 * atol * a_r + 2 * rtol * q_r + n * atol * atol + 2 * atol * rtol * a_r + rtol * rtol * q_r
    return abs(s_c - s_r) <= sum_e + 1e-5 * a_r + 1e-6 and abs(q_c - q_r) <= sum_q + 1e-5 * q_r + 1e-6


def fingerprints_agree(prints: object, ref_stats: object, atol: float, rtol: float) -> bool:
    """Could outputs with fingerprints ``prints`` (per output, per block: ``[sum, sum of squares]``) be within
    tolerance of reference outputs whose per-block ``[sum, sum^2, sum |r|, n]`` are ``ref_stats`` (taken by the
    reference worker, so no reference output has to reach the parent)? Every block must pass :func:`_consistent`.
    """
    if not isinstance(prints, list) or not isinstance(ref_stats, list) or len(prints) != len(ref_stats):
        return False
    for blocks, ref_blocks in zip(prints, ref_stats):
        if not isinstance(blocks, list) or not isinstance(ref_blocks, list) or len(blocks) != len(ref_blocks):
            return False
        if not all(isinstance(st, list) and _consistent(fp, st, atol, rtol) for fp, st in zip(blocks, ref_blocks)):
            return False
    return True


def bits_equal(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and _same_bits(x, y) for x, y in zip(a, b)
    )


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Bit equality (NaN payloads and -0.0 included) without copying: both viewed as unsigned integers of their
    width (4x faster than comparing ``tobytes()`` on 8 MB outputs)."""
    if x.itemsize not in (1, 2, 4, 8):
        return x.tobytes() == y.tobytes()
    width = np.dtype(f"u{x.itemsize}")
    return bool(np.array_equal(x.view(width), y.view(width)))
