"""Output dependence, parent side: does the candidate's output change between two trials the way the reference's does?

A constant, cached or input-free output (HACKS S6, S7) passes one comparison by luck or by design; across two
trials with different inputs its change misses the reference's change by ~100 %, while a correct kernel's matches
it to fp32 rounding. Used by :mod:`musaenv.verification.runtime` for ``output_independent_of_input``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["DEPENDENCE_MAX_MISMATCH", "input_dependence_failures"]

# Output-dependence thresholds: a correct kernel's trial-to-trial change matches the reference's to ~1e-6 relative
# (fp32 rounding); a constant or input-free output misses it by ~100 %. 0.5 leaves a wide margin both ways.
DEPENDENCE_MAX_MISMATCH = 0.5
REFERENCE_CONSTANT_REL = 1e-6
DEPENDENCE_SAMPLE = 1 << 16  # elements compared per output: keeps the check at milliseconds for 16 MB outputs


def _sample(a: np.ndarray) -> np.ndarray:
    """Up to DEPENDENCE_SAMPLE evenly spaced elements as float64 (a constant output is constant on any subset)."""
    flat = a.ravel()
    if flat.size > DEPENDENCE_SAMPLE:
        flat = flat[np.linspace(0, flat.size - 1, DEPENDENCE_SAMPLE).astype(np.int64)]
    return flat.astype(np.float64)


def _norm(x: np.ndarray) -> float:
    """Euclidean norm without BLAS (whose threads stall for milliseconds when the cores are busy with workers)."""
    return math.sqrt(float(np.einsum("i,i->", x, x)))


def _mismatch(c_i: np.ndarray, c_j: np.ndarray, r_i: np.ndarray, r_j: np.ndarray) -> float | None:
    """Relative miss of the candidate's trial-to-trial change against the reference's; None if the ref is constant."""
    r_i, r_j = _sample(r_i), _sample(r_j)
    keep = np.isfinite(r_i) & np.isfinite(r_j)
    d_ref = r_i[keep] - r_j[keep]
    scale = max(_norm(r_i[keep]), _norm(r_j[keep]))
    ref_change = _norm(d_ref)
    if d_ref.size == 0 or ref_change <= REFERENCE_CONSTANT_REL * scale or ref_change == 0.0:
        return None
    d_c = _sample(c_i)[keep] - _sample(c_j)[keep]
    return _norm(d_c - d_ref) / ref_change


def input_dependence_failures(
    cand: Sequence[Sequence[np.ndarray]], ref: Sequence[Sequence[np.ndarray]], usable: Sequence[bool]
) -> list[str]:
    """Output indices (with trial pairs) whose change between two usable trials does not follow the reference's.

    Args:
        cand: Candidate outputs per trial.
        ref: Reference outputs per trial (same inputs).
        usable: Per trial, whether it may be used (it passed the comparison).
    """
    found: list[str] = []
    idx = [i for i, ok in enumerate(usable) if ok and i < len(cand) and i < len(ref)]
    for a_pos, i in enumerate(idx):
        for j in idx[a_pos + 1 :]:
            if len(cand[i]) != len(cand[j]) or len(ref[i]) != len(ref[j]):
                continue
            for k, (ci, cj, ri, rj) in enumerate(zip(cand[i], cand[j], ref[i], ref[j])):
                if ci.shape != cj.shape or ri.shape != rj.shape or ci.shape != ri.shape:
                    continue
                miss = _mismatch(ci, cj, ri, rj)
                if miss is not None and miss > DEPENDENCE_MAX_MISMATCH:
                    found.append(f"output {k}, trials {i + 1} and {j + 1}: change misses the reference's by {miss:.0%}")
    return found
