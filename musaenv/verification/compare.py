"""Compare candidate outputs with reference outputs, in the parent process, with numpy.

NaN or Inf where the reference is finite is a mismatch (HACKS S21: NaN as a wildcard); where the reference
itself is non-finite the candidate must match it exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["TrialComparison", "compare_outputs", "trivial_output_passes"]


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
        c64 = c.astype(np.float64, copy=False)
        r64 = r.astype(np.float64, copy=False)
        finite = np.isfinite(r64)
        if not np.array_equal(c64[~finite], r64[~finite], equal_nan=True):
            return TrialComparison(False, reason=f"output {i}: non-finite reference values not reproduced")
        cf, rf = c64[finite], r64[finite]
        if not np.all(np.isfinite(cf)):
            n = int(np.count_nonzero(~np.isfinite(cf)))
            return TrialComparison(False, reason=f"output {i}: {n} NaN/Inf value(s) where the reference is finite")
        if cf.size == 0:
            continue
        err = np.abs(cf - rf)
        worst_abs = max(worst_abs, float(err.max()))
        worst_rel = max(worst_rel, float((err / np.maximum(np.abs(rf), 1e-12)).max()))
        bad = err > atol + rtol * np.abs(rf)
        if bad.any():
            n = int(np.count_nonzero(bad))
            return TrialComparison(
                False,
                worst_abs,
                worst_rel,
                f"output {i}: {n} of {bad.size} values outside atol={atol:g}, rtol={rtol:g} "
                f"(max abs error {float(err.max()):.3g})",
            )
    return TrialComparison(True, worst_abs, worst_rel)


def trivial_output_passes(ref: Sequence[np.ndarray], atol: float, rtol: float) -> bool:
    """Would an all-zeros or a constant (the mean) output pass this trial? (HACKS S6: a degenerate test.)"""
    for r in ref:
        r64 = r.astype(np.float64, copy=False)
        finite = r64[np.isfinite(r64)]
        if finite.size == 0:
            continue
        for const in (0.0, float(finite.mean())):
            if not np.all(np.abs(finite - const) <= atol + rtol * np.abs(finite)):
                return False
    return True
