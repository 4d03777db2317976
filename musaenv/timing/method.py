"""How a speedup is measured: one interface over the timing methods (``TimingConfig.reference``).

A :class:`TimingMethod` says how each side is timed (each candidate call gated and clocked by the parent, or timed
in the candidate's own process; the reference beside it in every evaluation, or once per machine and cached),
how the speedup and its interval come from the samples (:meth:`~TimingMethod.estimate`), which checks of the
samples apply (:meth:`~TimingMethod.findings`), and its :attr:`~TimingMethod.key`: a name and a version that are
part of every cached timing key, so changing how a method measures re-measures instead of comparing with times
measured the old way. The parent picks one with :func:`timing_method`; the evaluator, the reference service and
the verdict ask it instead of branching on the method's name. Parent side, pure Python (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from musaenv.timing.paired import PairedSamples, cost_extra, fault_extra, outside_work, paired_evidence, sample_mismatch
from musaenv.types import TimingStats

__all__ = ["METHODS", "Estimate", "PairedTiming", "SeparateTiming", "TimingFindings", "TimingMethod", "timing_method"]


@dataclass(frozen=True)
class Estimate:
    """A speedup as a method measured it: both sides' timings, the speedup, and (paired timing) its interval and
    pair count (0: not paired)."""

    cand: TimingStats
    ref: TimingStats | None
    speedup: float | None
    low: float | None = None
    high: float | None = None
    pairs: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    def capped(self, speedup: float | None) -> Estimate:
        """This estimate with its speedup lowered to ``speedup`` (a re-measurement disagreed): the interval scales
        with it; a higher or missing value changes nothing."""
        if speedup is None or self.speedup is None or speedup >= self.speedup:
            return self
        k = speedup / self.speedup
        low = None if self.low is None else self.low * k
        high = None if self.high is None else self.high * k
        return Estimate(self.cand, self.ref, speedup, low, high, self.pairs, self.extra)


@dataclass(frozen=True)
class TimingFindings:
    """What the checks of a method's samples found: cheating flags, warnings, and the evidence (``extra``)."""

    flags: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)


class TimingMethod:
    """One way of timing the reference and the candidate (the subclasses); stateless, shared by name."""

    name: str
    version: str
    gated: bool = False
    """Each candidate call waits for the parent, which clocks it (``TimingPlan.paired``), beside the reference."""
    caches_reference: bool = False
    """Reference timings are measured once per machine and read back from disk."""

    @property
    def key(self) -> str:
        """Name and version: part of every cached timing key."""
        return f"{self.name}-{self.version}"

    def estimate(
        self, cand_ms: list[float], ref: TimingStats | None, paired: PairedSamples | None, calls: list[int] | None
    ) -> Estimate | None:
        """The speedup from the candidate's counted samples ``cand_ms`` (calls ``calls``; ``None``: all), the
        reference's timing ``ref`` and, for paired timing, the parent's samples; ``None`` when nothing was timed."""
        raise NotImplementedError

    def findings(self, paired: PairedSamples | None) -> TimingFindings:
        """The checks of this method's samples (none where the samples are the candidate worker's own)."""
        return TimingFindings()


class PairedTiming(TimingMethod):
    """The default (:mod:`musaenv.evaluator.pairing`): the reference and the candidate call by call, interleaved
    on the same cores, each call clocked by the parent; the speedup is the median of the per-pair ratios with the
    order-statistics interval of a median (:meth:`PairedSamples.speedup`)."""

    name = "paired"
    version = "cpu-1"  # the worker's CPU time over the parent's window (wall clock on a GPU)
    gated = True

    def estimate(
        self, cand_ms: list[float], ref: TimingStats | None, paired: PairedSamples | None, calls: list[int] | None
    ) -> Estimate | None:
        if paired is None:  # the pairing did not happen (an early end): the worker's own samples say nothing
            return None
        idx = paired.counted(calls)
        got = paired.speedup(idx)
        if got is None:
            return None
        speedup, low, high = got
        cand = TimingStats.from_samples([paired.cand_ms[i] for i in idx])
        ref_stats = TimingStats.from_samples([paired.ref_ms[i] for i in idx])
        return Estimate(
            cand, ref_stats, speedup, low, high, len(idx), {**fault_extra(paired, calls), **cost_extra(paired)}
        )

    def findings(self, paired: PairedSamples | None) -> TimingFindings:
        if paired is None:
            return TimingFindings()
        forged = sample_mismatch(paired)
        # A warning, not a verdict, until calibrated: an honest l1_sum_dim (0.6 ms calls) tripped it under CI load.
        outside = ("timing_work_outside",) if outside_work(paired) else ()
        evidence: dict[str, object] = {"timing_forged": paired_evidence(paired)} if forged else {}
        return TimingFindings(("timing_forged",) if forged else (), outside, evidence)


class SeparateTiming(TimingMethod):
    """The reference timed apart from the candidate: the speedup is the ratio of the two medians, no interval.
    ``dedicated_host``: the reference once per machine, cached (a quiet host only: load moves the candidate's
    time, not the cached one); ``every``: the reference in every evaluation, after the candidate."""

    version = "median-1"

    def __init__(self, name: str, caches_reference: bool) -> None:
        self.name, self.caches_reference = name, caches_reference

    def estimate(
        self, cand_ms: list[float], ref: TimingStats | None, paired: PairedSamples | None, calls: list[int] | None
    ) -> Estimate | None:
        if not cand_ms:
            return None
        cand = TimingStats.from_samples(cand_ms)
        speedup = ref.median_ms / cand.median_ms if ref is not None and cand.median_ms > 0 else None
        return Estimate(cand, ref, speedup)


METHODS: dict[str, TimingMethod] = {
    m.name: m for m in (PairedTiming(), SeparateTiming("dedicated_host", True), SeparateTiming("every", False))
}


def timing_method(name: str) -> TimingMethod:
    """The method of ``TimingConfig.reference`` (validated by the config)."""
    return METHODS[name]
