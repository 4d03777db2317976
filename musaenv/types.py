"""JSON-safe records shared by every layer: :class:`Stage`, :class:`TimingStats`, :class:`BuildRecord`,
:class:`EvalResult`.

No torch here: these records cross process boundaries and are written to JSONL.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BuildRecord", "EvalResult", "Stage", "TimingStats", "build_tier_of", "declined"]


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


def declined(tier: str, why: str) -> dict[str, str]:
    """One faster build path that did not apply and why, as :attr:`BuildRecord.declined` lists it."""
    return {"tier": tier, "why": why}


@dataclass(frozen=True)
class BuildRecord:
    """One build a candidate asked for, as the parent served it (an item of ``EvalResult.extra["builds"]``).

    Attributes:
        name: The module's name (its content hash); empty when the request was refused before it had one.
        ok: The module was built (or the compile-only check passed).
        seconds: Wall time of the request in the parent (a cache hit: the lookup only).
        cached: The artifact (or the sealed compile error) came from the build cache.
        tier: The build path that produced it (``split``, ``pch``, ``torch``, ``cuda_split``, ``musa``,
            ``compile_only``; ``nvrtc`` for CuPy kernels), the same on a cache hit; ``None`` when no path ran (a
            refused request, a harness failure before one was chosen, an entry cached before tiers were recorded).
        declined: The faster paths that did not apply, in the order they were tried, each ``{"tier", "why"}``
            (``precompiled_header`` when a path ran without its precompiled header; docs/verification.md).
        kind: ``extension`` (``load_inline``) or ``cupy`` (a kernel compiled in the worker).
    """

    name: str
    ok: bool
    seconds: float
    cached: bool
    tier: str | None = None
    declined: tuple[dict[str, str], ...] = ()
    kind: str = "extension"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        d = dataclasses.asdict(self)
        d["declined"] = [dict(x) for x in self.declined]
        d["seconds"] = _finite_or_none(self.seconds)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BuildRecord:
        """Inverse of :meth:`to_dict` (records written before tiers were recorded read with ``tier=None``).

        Raises:
            ValueError: not an object, a field it does not know or of the wrong type, or one of ``name``, ``ok``,
                ``seconds``, ``cached`` missing (a worker's record is refused at decoding, :mod:`musaenv.isolation`).
        """
        problems = _build_record_problems(d)
        if problems:
            raise ValueError(f"not a build record: {'; '.join(problems)}")
        why = tuple({"tier": x["tier"], "why": x["why"]} for x in d.get("declined") or ())
        return cls(name=d["name"], ok=d["ok"], seconds=float(d["seconds"] or 0.0), cached=d["cached"],
                   tier=d.get("tier"), declined=why, kind=d.get("kind", "extension"))  # fmt: skip


#: The fields of a :class:`BuildRecord`'s JSON and the types each may hold (``seconds``: ``None`` when not finite).
_BUILD_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "ok": (bool,),
    "seconds": (int, float, type(None)),
    "cached": (bool,),
    "tier": (str, type(None)),
    "declined": (list, tuple),
    "kind": (str,),
}


def _build_record_problems(d: object) -> list[str]:
    """What keeps ``d`` from being a :class:`BuildRecord`'s JSON (empty: nothing)."""
    if not isinstance(d, dict):
        return [f"expected an object, found {type(d).__name__}"]
    out = [f"missing {k!r}" for k in ("name", "ok", "seconds", "cached") if k not in d]
    for key, value in d.items():
        kinds = _BUILD_FIELDS.get(key)
        if kinds is None:
            out.append(f"unknown field {key!r}")
        elif not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            out.append(f"{key!r} is {value!r:.60}")
    declined = d.get("declined")
    for x in declined if isinstance(declined, (list, tuple)) else ():
        if not (isinstance(x, dict) and set(x) == {"tier", "why"} and all(isinstance(v, str) for v in x.values())):
            out.append(f"a declined path is {x!r:.60}, expected {{'tier': str, 'why': str}}")
    return out


def build_tier_of(builds: Sequence[BuildRecord]) -> str | None:
    """The one tier of a candidate's builds (``EvalResult.build_tier``): ``None`` when none named one, ``mixed``
    when they took different paths."""
    tiers = {b.tier for b in builds} - {None}
    if not tiers:
        return None
    return str(next(iter(tiers))) if len(tiers) == 1 else "mixed"


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
        build_tier: The build path of the candidate's builds (``split``, ``pch``, ``torch``, ``cuda_split``...;
            ``mixed`` when they took different paths, ``None`` when nothing was built or no path was recorded). Each
            build's own tier, time and the faster paths that did not apply are in ``extra["builds"]``
            (:class:`BuildRecord`).
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
    build_tier: str | None = None
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
