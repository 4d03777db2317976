"""JSON-safe records shared by every layer: :class:`Stage`, :class:`TimingStats`, :class:`EvalResult`.

No torch here: these records cross process boundaries and are written to JSONL.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EvalResult", "Stage", "TimingStats"]


class Stage(str, enum.Enum):
    """How far a candidate got, and how it ended.

    * ``format_error``: no candidate could be extracted (no code, no ``ModelNew``, not Python).
    * ``compile_error``: the candidate's extension failed to build or load.
    * ``runtime_error``: the candidate raised or crashed while running.
    * ``timeout``: a stage ran past its time limit.
    * ``incorrect``: it ran, but some correctness trials failed.
    * ``cheating``: a reward-hacking defence fired (see ``flags``).
    * ``compiled``: built for a device that is not present, so not run.
    * ``correct``: every correctness trial passed.
    * ``infra_error``: the harness failed, not the candidate; never a policy reward.
    """

    FORMAT_ERROR = "format_error"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    CHEATING = "cheating"
    COMPILED = "compiled"
    CORRECT = "correct"
    INFRA_ERROR = "infra_error"

    def __str__(self) -> str:
        return self.value


def _finite_or_none(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class TimingStats:
    """Summary of repeated timings, in milliseconds.

    Attributes:
        median_ms: Median time of one call (the number speedups use).
        mean_ms: Mean time of one call.
        std_ms: Standard deviation.
        min_ms: Fastest call.
        max_ms: Slowest call.
        q20_ms: 20th percentile.
        q80_ms: 80th percentile.
        n: Number of timed calls.
    """

    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    q20_ms: float
    q80_ms: float
    n: int

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> TimingStats:
        """Summarise a non-empty list of per-call times in milliseconds."""
        if not samples_ms:
            raise ValueError("TimingStats.from_samples needs at least one sample")
        xs = sorted(float(s) for s in samples_ms)
        n = len(xs)
        mean = sum(xs) / n
        var = sum((x - mean) ** 2 for x in xs) / n

        def quantile(q: float) -> float:
            pos = q * (n - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, n - 1)
            return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

        return cls(
            median_ms=quantile(0.5),
            mean_ms=mean,
            std_ms=math.sqrt(var),
            min_ms=xs[0],
            max_ms=xs[-1],
            q20_ms=quantile(0.2),
            q80_ms=quantile(0.8),
            n=n,
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TimingStats:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class EvalResult:
    """Everything the verifier found out about one candidate. JSON-safe via :meth:`to_dict`.

    Attributes:
        stage: Final :class:`Stage`.
        task_id: Task the candidate was evaluated on.
        backend: Backend name (``cpu``, ``cuda``, ``triton``, ``musa``).
        device: Device string the candidate ran on, or ``None`` when it did not run.
        trials_passed: Correctness trials passed.
        trials_total: Correctness trials attempted (0 when the candidate never ran).
        max_abs_error: Worst absolute error over all trials (``None`` if never compared).
        max_rel_error: Worst relative error over all trials.
        speedup: Reference time / candidate time, ``None`` when not timed. Paired timing (the default): the median
            of the per-pair ratios of calls timed side by side by the parent (docs/verification.md); cached
            reference timing: reference median / candidate median.
        speedup_low: Lower end of the speedup's 95 % interval (paired timing; ``None`` otherwise). A threshold
            (1.0, fast_p's p) counts as passed only when this end passes it (docs/rewards.md).
        speedup_high: Upper end of that interval.
        timing_pairs: Number of (reference, candidate) pairs the paired speedup comes from (0: not paired).
        runtime_ms: Candidate median time per call.
        ref_runtime_ms: Reference median time per call.
        timing: Candidate :class:`TimingStats`.
        ref_timing: Reference :class:`TimingStats`.
        compile_time_s: Seconds spent building extensions (0 on a cache hit).
        build_cached: True when every extension came from the build cache.
        eval_time_s: Wall time of the whole evaluation (``None`` when the response was refused by parsing or static
            checks before any process ran).
        compiler_log: Truncated compiler output (errors verbatim).
        runtime_log: Truncated traceback or crash description.
        flags: Named findings that decided a ``cheating`` verdict (e.g. ``forbidden_torch_op``).
        warnings: Findings that did not change the verdict.
        messages: Human-readable notes, one per finding, in order.
        extra: Backend-specific, JSON-safe details.
        policy: Verification policy of the verdict (``strict``, ``kernelbench``, ...; docs/verification.md).
    """

    stage: Stage
    task_id: str = ""
    backend: str = ""
    device: str | None = None
    trials_passed: int = 0
    trials_total: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    timing_pairs: int = 0
    runtime_ms: float | None = None
    ref_runtime_ms: float | None = None
    timing: TimingStats | None = None
    ref_timing: TimingStats | None = None
    compile_time_s: float | None = None
    build_cached: bool | None = None
    eval_time_s: float | None = None
    compiler_log: str = ""
    runtime_log: str = ""
    flags: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    policy: str = ""

    @property
    def pass_fraction(self) -> float:
        """Fraction q of correctness trials passed (0.0 when none ran)."""
        return self.trials_passed / self.trials_total if self.trials_total else 0.0

    @property
    def is_correct(self) -> bool:
        """True when the verdict is ``correct``."""
        return self.stage is Stage.CORRECT

    def replace(self, **changes: Any) -> EvalResult:
        """Return a copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict (floats that are NaN/Inf become ``None``)."""
        d: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Stage):
                v = v.value
            elif isinstance(v, TimingStats):
                v = v.to_dict()
            elif isinstance(v, tuple):
                v = list(v)
            elif isinstance(v, float):
                v = _finite_or_none(v)
            d[f.name] = v
        d["pass_fraction"] = self.pass_fraction
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in d:
                continue
            v = d[f.name]
            if f.name == "stage":
                v = Stage(v)
            elif f.name in ("timing", "ref_timing") and v is not None:
                v = TimingStats.from_dict(v)
            elif f.name in ("flags", "warnings", "messages"):
                v = tuple(v)
            kw[f.name] = v
        return cls(**kw)
