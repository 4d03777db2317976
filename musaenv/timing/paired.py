"""Paired timing's statistics (parent side; pure Python, no torch).

The parent times the reference and the candidate call by call, interleaved on the same cores
(:mod:`musaenv.evaluator.pairing`): pair ``i`` is the reference's and the candidate's call on the same fresh input,
moments apart. Host load slows both calls of a pair alike, so the ratio of a pair moves much less than either
time, and the median of the per-pair ratios is the speedup. Its confidence interval is the distribution-free one
of a median (order statistics of the ratios, from the binomial distribution), so it needs no assumption about how
a busy host skews the times.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONFIDENCE",
    "PairedSamples",
    "cost_extra",
    "fault_extra",
    "median_interval",
    "outside_work",
    "paired_evidence",
    "sample_mismatch",
    "settled",
]

CONFIDENCE = 0.95
"""Coverage of the speedup's interval (:func:`median_interval`)."""

# The worker's own measure of a call lies inside the parent's window around it, which adds the pipe's round trip
# (tens of microseconds, milliseconds when the host is busy). A candidate whose own measures are far below what the
# parent saw, by more than the reference's own gap plus this slack, reported samples it did not measure.
_MISMATCH_RATIO = 0.5
_MISMATCH_SLACK_MS = 1.0


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A ``confidence`` interval for the median of ``values`` from their order statistics.

    The interval ``[x_(k), x_(n+1-k)]`` (sorted, 1-based) covers the median with probability ``1 - 2 P(B < k)``
    for ``B ~ Binomial(n, 1/2)``, whatever the distribution; ``k`` is the largest rank that keeps at least
    ``confidence``. Below 6 values no rank does: the interval is then the whole range (it covers less).
    """
    if not values:
        raise ValueError("median_interval needs at least one value")
    xs = sorted(values)
    n = len(xs)
    alpha = (1.0 - confidence) / 2
    k, below = 0, 0.0  # below = P(B < k + 1) while searching
    for j in range(n // 2 + 1):
        below += math.comb(n, j) / 2**n
        if below > alpha:
            break
        k = j + 1
    k = max(k, 1)
    return xs[k - 1], xs[n - k]


def settled(ref_ms: list[float], cand_ms: list[float], width: float) -> bool:
    """True when the speedup of these pairs is known to ``width``: its :func:`median_interval` spans at most
    ``2 * width`` in log space (``TimingConfig.stop_width``; a pair with a zero or negative time makes it unknown).
    The rule reads only how far apart the pairs' ratios lie, never where they lie, so when a run stops does not
    lean its median either way."""
    ratios = [r / c for r, c in zip(ref_ms, cand_ms, strict=False) if r > 0 and c > 0]
    if width <= 0 or len(ratios) < len(ref_ms) or len(ratios) < 3:
        return False
    lo, hi = median_interval(ratios)
    return math.log(hi) - math.log(lo) <= 2 * width


@dataclass(frozen=True)
class PairedSamples:
    """What the parent measured in paired timing, call by call (milliseconds).

    Attributes:
        ref_ms: The reference's calls, as the parent timed them from sending ``time_call`` to reading
            ``time_done``: the worker's CPU time over that window (``clock="cpu"``) or the parent's monotonic
            clock (``"wall"``, GPUs).
        cand_ms: The candidate's calls, likewise.
        ref_own_ms: The reference worker's own measure of each call (trusted process).
        cand_own_ms: The candidate worker's own measure of each call: cross-checked, never used as a sample.
        ref_first: Per pair, True when the reference's call ran first (alternated to cancel order effects).
        ref_prints: The reference's fingerprints of its timed calls (reference form), ``None`` for a compiled
            baseline (whose outputs may differ from the eager reference within tolerance).
        baseline_note: Why the timed baseline is not the one asked for (torch.compile failed), else ``""``.
        clock: ``cpu`` or ``wall``: what :attr:`ref_ms` and :attr:`cand_ms` measure.
        ref_out_ms: CPU time of the reference worker between the end of one window and the start of the next
            (preparing the next call: clone, cache flush), from the second call on; empty on the wall clock.
        cand_out_ms: The candidate's, likewise.
        threads: Cores the workers may use (``TimingConfig.cpu_threads``).
        seeds: Per pair, the seed both workers drew the pair's inputs from (picked by the parent when the pair
            began; empty where the workers timed a pool drawn ahead).
        unsettled: CPU-clock readings taken while a worker thread still ran (after the parent's wait for it ran
            out; :class:`~musaenv.evaluator.cpu_watch.ProcessCpuClock`): those may lag by up to a scheduler tick.
        ref_faults: Per pair, the reference worker's ``(minor, major)`` page faults inside its window, as the
            parent read them from the kernel (CPU clock only; empty otherwise).
        cand_faults: The candidate's, likewise.
        ref_prep_ms: Per call, the parent's wall time from asking the reference to prepare it (its inputs drawn, the
            cache flushed) to its readiness: what pairing costs beyond the calls themselves.
        cand_prep_ms: The candidate's, likewise.
        ref_wall_ms: Per call, the parent's wall time from sending ``time_call`` to reading ``time_done``: the
            call plus the handshake that clocks it from outside (two messages and the kernel's accounting read).
        cand_wall_ms: The candidate's, likewise.
        ref_kept: The eager reference's outputs of its kept timed calls (call index -> arrays, in the order of the
            call's outputs), sent with its ``timing`` message: the full recheck of the candidate's kept calls on the
            same inputs needs no second reference run of them. Empty for a compiled baseline.
    """

    ref_ms: list[float]
    cand_ms: list[float]
    ref_own_ms: list[float]
    cand_own_ms: list[float]
    ref_first: list[bool]
    ref_prints: list[object] | None = None
    baseline_note: str = ""
    clock: str = "wall"
    ref_out_ms: list[float] = field(default_factory=list)
    cand_out_ms: list[float] = field(default_factory=list)
    threads: int = 1
    unsettled: int = 0
    seeds: list[int] = field(default_factory=list)
    ref_faults: list[tuple[int, int]] = field(default_factory=list)
    cand_faults: list[tuple[int, int]] = field(default_factory=list)
    ref_prep_ms: list[float] = field(default_factory=list)
    cand_prep_ms: list[float] = field(default_factory=list)
    ref_wall_ms: list[float] = field(default_factory=list)
    cand_wall_ms: list[float] = field(default_factory=list)
    ref_kept: dict[int, list[Any]] = field(default_factory=dict)

    @property
    def pairs(self) -> int:
        """Number of complete pairs."""
        return min(len(self.ref_ms), len(self.cand_ms))

    def faulted(self) -> list[int]:
        """Pairs in which either window waited on a major page fault: a page the host's memory pressure had
        evicted, read back from disk inside the window (milliseconds each). That is the machine's doing, not the
        program's, and it lands on one side of the pair only."""
        sides = (self.ref_faults, self.cand_faults)
        return [i for i in range(self.pairs) if any(i < len(f) and f[i][1] > 0 for f in sides)]

    def counted(self, calls: list[int] | None = None) -> list[int]:
        """The pairs the speedup is the median of: ``calls`` (default all), less the :meth:`faulted` ones while at
        least half of them and 3 remain (otherwise all: a program that faults in every window is measured as it
        runs, so faulting on purpose buys nothing; a window it has without faults is an honest measure)."""
        idx = list(range(self.pairs)) if calls is None else [i for i in calls if i < self.pairs]
        bad = set(self.faulted())
        kept = [i for i in idx if i not in bad]
        return kept if len(kept) >= max(3, (len(idx) + 1) // 2) else idx

    def ratios(self, calls: list[int] | None = None) -> list[float]:
        """Per pair, reference time / candidate time (only ``calls`` when given)."""
        idx = range(self.pairs) if calls is None else [i for i in calls if i < self.pairs]
        return [self.ref_ms[i] / self.cand_ms[i] for i in idx if self.cand_ms[i] > 0]

    def speedup(self, calls: list[int] | None = None) -> tuple[float, float, float] | None:
        """``(median ratio, interval low, interval high)`` over the :meth:`counted` pairs (of ``calls``, when
        given)."""
        r = self.ratios(self.counted(calls))
        if not r:
            return None
        lo, hi = median_interval(r)
        return statistics.median(r), lo, hi


def sample_mismatch(p: PairedSamples) -> str:
    """Why the candidate's own per-call measures cannot be true, or ``""``.

    An honest worker's measure of a call (its wall time around call and fingerprint) lies inside the parent's
    window around it. On the wall clock it falls short of the window by the pipe's round trip and the scheduling
    delays, which the reference worker shows on the same cores moments apart; on the CPU clock it is at least the
    window's CPU time divided by the cores allowed (a waiting worker uses none). A median candidate measure below
    half of that, by more than a slack, was not measured: the in-process clock, or the samples, were rewritten.
    """
    n = min(p.pairs, len(p.cand_own_ms), len(p.ref_own_ms))
    if n == 0:
        return ""
    own = statistics.median(p.cand_own_ms[:n])
    if p.clock == "cpu":
        # The harness's own CPU in a window beyond the call it measures (decoding the word to run, sending the
        # answer, a garbage collection there) is what the trusted reference shows on the same cores moments apart:
        # left out of what the candidate's measure is held to (a wrong copy kernel's 0.3 ms calls were once taken
        # for forged ones on a host with a load of 8).
        cores = max(1, p.threads)
        ref_gap = statistics.median(max(p.ref_ms[i] / cores - p.ref_own_ms[i], 0.0) for i in range(n))
        expected = statistics.median(max(p.cand_ms[i] / cores - ref_gap, 0.0) for i in range(n))
        slack = _MISMATCH_SLACK_MS + 0.5 * ref_gap
    else:
        if any(p.cand_own_ms[i] > p.cand_ms[i] + _MISMATCH_SLACK_MS for i in range(n)):
            return "a timed call the candidate's process measured as longer than the parent's window around it"
        ref_gap = statistics.median(max(p.ref_ms[i] - p.ref_own_ms[i], 0.0) for i in range(n))
        expected = statistics.median(max(p.cand_ms[i] - ref_gap, 0.0) for i in range(n))
        slack = _MISMATCH_SLACK_MS + 0.5 * ref_gap  # expected already leaves out the typical gap
    if own < _MISMATCH_RATIO * expected and expected - own > slack:
        return (
            f"the candidate's process measured its timed calls at {own:.3f} ms (median) while the parent measured "
            f"{expected:.3f} ms of call ({p.clock} clock)"
        )
    return ""


def paired_evidence(p: PairedSamples) -> dict[str, object]:
    """What :func:`sample_mismatch` judged, call by call (ms, rounded to the microsecond), with its reason: the
    ``extra["timing_forged"]`` of a result it flagged, so that a user can see why."""

    def us(xs: list[float]) -> list[float]:
        return [round(x, 3) for x in xs]

    return {
        "why": sample_mismatch(p),
        "clock": p.clock,
        "threads": p.threads,
        "unsettled": p.unsettled,
        "cand_ms": us(p.cand_ms),
        "cand_own_ms": us(p.cand_own_ms),
        "ref_ms": us(p.ref_ms),
        "ref_own_ms": us(p.ref_own_ms),
        "cand_out_ms": us(p.cand_out_ms),
        "ref_out_ms": us(p.ref_out_ms),
    }


def fault_extra(p: PairedSamples, calls: list[int] | None = None) -> dict[str, object]:
    """``extra["timing_faults"]`` (CPU clock only, else empty): per side the median minor page faults of a window
    (fresh pages its outputs touched: the allocator's doing as much as the program's, the same on both sides when
    they allocate alike) and the pairs a major fault struck, with those left out of the speedup."""
    if not p.ref_faults or not p.cand_faults:
        return {}
    kept = set(p.counted(calls))
    major = p.faulted()
    return {
        "timing_faults": {
            "minor_median": {
                "reference": statistics.median(f[0] for f in p.ref_faults),
                "candidate": statistics.median(f[0] for f in p.cand_faults),
            },
            "major_pairs": major,
            "left_out": [i for i in major if i not in kept],
        }
    }


def cost_extra(p: PairedSamples) -> dict[str, object]:
    """``extra["timing_cost"]``: where the pairing's wall time went, per side (ms, summed over its calls):
    ``prepare`` (inputs drawn and cache flushed before each call), ``window`` (each call as the parent clocked it)
    and, of the window, ``handshake``: the window less the worker's own measure of its call, i.e. what clocking
    each call from outside the worker adds (benchmarks/defence_cost.py reads it). Empty when not recorded."""
    if not p.ref_wall_ms or not p.cand_wall_ms:
        return {}

    def side(prep: list[float], wall: list[float], own: list[float]) -> dict[str, float]:
        shake = sum(max(w - o, 0.0) for w, o in zip(wall, own, strict=False))
        return {"prepare": round(sum(prep), 1), "window": round(sum(wall), 1), "handshake": round(shake, 1)}

    return {
        "timing_cost": {
            "calls": p.pairs,
            "reference": side(p.ref_prep_ms, p.ref_wall_ms, p.ref_own_ms),
            "candidate": side(p.cand_prep_ms, p.cand_wall_ms, p.cand_own_ms),
        }
    }


def outside_work(p: PairedSamples) -> str:
    """Why the candidate worked outside its timed windows, or ``""`` (CPU clock only).

    Between two windows a worker only prepares its next call (a fresh clone of the input, the cache flushed) and
    waits, which costs the reference and the candidate alike on the same inputs. A candidate whose CPU time out
    there exceeds the reference's by more than its own median call (and a slack) did its call's work before the
    clock started: in an overridden clone, on a thread while the reference was timed, or on a fault handler.
    """
    if p.clock != "cpu" or not p.cand_out_ms or not p.ref_out_ms:
        return ""
    extra = statistics.median(p.cand_out_ms) - statistics.median(p.ref_out_ms)
    call = statistics.median(p.cand_ms) if p.cand_ms else 0.0
    if extra > call + _MISMATCH_SLACK_MS:
        return (
            f"the candidate's process used {extra:.3f} ms more CPU than the reference's between its timed calls "
            f"(median), more than its timed call itself ({call:.3f} ms)"
        )
    return ""
