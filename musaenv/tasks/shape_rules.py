"""Budgets, records and value rules of shape derivation (:mod:`musaenv.tasks.derive` has the search). No torch."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from musaenv.config import _Config, _require

__all__ = [
    "INTERP_BATCH",
    "LARGE",
    "META_LIMIT_S",
    "MIN_SCALED",
    "PEAK_FLOPS",
    "REAL_FLOPS",
    "REAL_STATE_BYTES",
    "STEPS",
    "Derivation",
    "ShapeConfig",
    "call_bytes",
    "ladder",
    "leading_only",
    "scaled_value",
    "shape_info",
    "signature",
]

# CPU seconds a meta-device forward may take before outputs are measured for real instead: KernelBench's networks
# took under 0.1 s each on meta here; its LSTMs and GRUs, decomposed step by step, 20-48 s at their own sizes.
META_LIMIT_S = 2.5
LARGE = 16  # below this a constant is a hyper-parameter (kernel 3, stride 2, 8 heads), not a size to scale
STEPS = 3  # scale factors 2^(-k/3): bytes of a 4-d input change by 2.5x per step, so the fit is within that
MIN_SCALED = 2  # scaling stops here; the reference's own checks (a kernel larger than its input) stop it earlier
PEAK_FLOPS = 2e11  # one core's optimistic fp32 peak: a forward counted above budget * this is never run for real
REAL_STATE_BYTES = 1 << 30  # parameters a real check may hold besides its inputs (VGG-16: 528 MB of weights)
REAL_FLOPS = 5e9  # a gpu-tier odd shape is also run for real here when it counts at most this (about 0.1-1 s)
# The interp tier's batch (the odd shape's is 3): a batch repeats the per-sample work, and a kernel that maps it
# onto its grid (the public direct convolution: batch x 3 x 1 programs of 363 loop steps at 18 x 18) pays a whole
# program per sample even when the sample fills a fraction of a block; two samples still catch a batch stride bug.
INTERP_BATCH = 2
_LADDER = (1, 3, 5, 7, 2, 4, 8, 16, 32)  # odd values first; then the least power-of-two factor the program needs


@dataclass(frozen=True)
class ShapeConfig(_Config):
    """Budgets and limits of shape derivation.

    Attributes:
        cpu_bytes: Inputs + outputs of one reference forward at a cpu-tier shape (meta-measured; parameters are
            counted by the memory guard, not here). The built-in cpu tier peaks at 24 MiB (l1_add, measured);
            32 MiB is that rounded up. An evaluation holds about 21 input sets (5 trials, 16 timing inputs).
        cpu_forward_ms: Reference forward CPU time on one thread at the cpu tier's timing shape (fastest of
            ``repeats`` after a warm-up). The built-in cpu tier measured 0.2-7.3 ms (median 0.8) here; 20 ms
            leaves room for networks while a candidate 10x slower still times within ``TimingConfig``'s 5 s.
        cpu_forward_max_ms: A file whose smallest accepted sizes are still slower than ``cpu_forward_ms`` (a
            network with its image size or widths written inside the program) keeps a cpu tier when its forward
            takes at most this, with the warning ``slow_cpu_tier``; slower files get ``no_cpu_tier``.
        repeats: Timed forwards per real check.
        check_timeout_s: CPU-time limit of one check (meta or real) in the probe worker (a wall-clock
            backstop of a few times this kills a check that hangs without computing).
        file_timeout_s: Budget of a whole file; what is not derived by then keeps fewer shapes (and says so).
        probe_memory_mb: Address-space limit of the probe worker.
        real_limit_bytes: gpu-tier odd shapes are also run for real when inputs + parameters are at most this.
        interp_bytes: Inputs + outputs of one call at an interp-tier shape (what Triton's CPU interpreter is judged
            at). The interpreter runs a launch's program instances one after another in Python (0.1-1 ms each), so
            its time grows with the outputs, not with a CPU's speed: a public direct convolution correct on a GPU
            (1,872 programs per launch at the cpu tier's 23 MB per call) used 480 CPU s without finishing its
            trials. 4 MiB (1M fp32 elements) keeps shapes of hundreds per axis, many programs per axis at usual
            block sizes (docs/backends.md, "Interpreter-sized shapes").
        interp_flops: FLOPs of one reference forward at an interp-tier shape (torch's ``FlopCounterMode`` on the
            meta device: matmuls, convolutions, attention; elementwise ops and reductions count none, so their
            tasks are sized by ``interp_bytes`` alone). Bytes bound how many program instances a launch has, not
            how many steps each loops: the public direct convolution above loops 363 (channel, kh, kw) steps per
            instance at 1.6 CPU ms a step (one 32 x 64 tile), and at 4 MiB (312 instances a launch, 362 MFLOPs a
            forward) as at 1 MiB (96, 80 MFLOPs) its trials used all 480 CPU s. A kernel accumulating one rank-1
            update of a 2,048-element tile per step costs about 1.6 CPU s per 4 MFLOPs there; 16 MFLOPs keeps a
            forward of it to seconds (with the batch held at 2: batch 2 at 44 x 44, 133 CPU s for its trials).
    """

    cpu_bytes: int = 32 << 20
    cpu_forward_ms: float = 20.0
    cpu_forward_max_ms: float = 250.0
    repeats: int = 3
    check_timeout_s: float = 10.0
    file_timeout_s: float = 60.0
    probe_memory_mb: int = 8192
    real_limit_bytes: int = 64 << 20
    interp_bytes: int = 4 << 20
    interp_flops: int = 16_000_000

    def __post_init__(self) -> None:
        n = type(self).__name__
        _require(self.cpu_bytes >= 1 << 16, n, "cpu_bytes >= 65536", self.cpu_bytes, "e.g. 32 << 20.")
        _require(1 << 12 <= self.interp_bytes <= self.cpu_bytes, n, "4096 <= interp_bytes <= cpu_bytes",
                 self.interp_bytes, "e.g. 4 << 20.")  # fmt: skip
        _require(self.interp_flops >= 1, n, "interp_flops >= 1", self.interp_flops, "e.g. 16_000_000.")
        _require(self.cpu_forward_ms > 0, n, "cpu_forward_ms > 0", self.cpu_forward_ms, "e.g. 20.")
        _require(self.repeats >= 1, n, "repeats >= 1", self.repeats, "")
        for name in ("check_timeout_s", "file_timeout_s"):
            _require(getattr(self, name) > 0, n, f"{name} > 0", getattr(self, name), "Give seconds.")


@dataclass
class Derivation:
    """What derivation found for one file.

    Attributes:
        shapes: Tier -> shapes (the first is the timing shape).
        info: Tier -> per shape: ``input_bytes``, ``output_bytes``, ``state_bytes``, ``flops``, ``forward_ms``
            (``None`` when not run for real) and ``validated`` (``meta`` or ``real``).
        warnings: Flags (``single_shape``, ``no_cpu_tier``, ``not_derived``).
        notes: Why, in sentences.
        seconds: Wall time of the derivation.
        source: The program the shapes are for when derivation rewrote it (size literals of ``get_inputs``
            lifted into module-level names, :mod:`musaenv.tasks.lift`); ``None``: the file as given.
    """

    shapes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    info: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (what the cache stores)."""
        return {k: getattr(self, k) for k in ("shapes", "info", "warnings", "notes", "seconds", "source")}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Derivation:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: d[k] for k in ("shapes", "info", "warnings", "notes", "seconds")}, source=d.get("source"))


def signature(reply: dict[str, Any]) -> str:
    return json.dumps([reply.get("inputs"), reply.get("outputs"), reply.get("state")])


def call_bytes(reply: dict[str, Any]) -> int:
    """Inputs + outputs of one call: what the cpu budget bounds (parameters are reported, not budgeted: a
    network's widths are often written inside the model, e.g. ResNet-101's 170 MB of weights)."""
    return int(reply.get("input_bytes", 0)) + int(reply.get("output_bytes", 0))


def leading_only(base: dict[str, Any], other: dict[str, Any]) -> bool:
    """``other`` (a probe reply) differs from ``base`` in the leading extent of every input tensor and nowhere else
    (the other extents, the non-tensor inputs and the parameters are the same), and some input has more extents
    than that one: the variable changed is a batch (the length of a vector, the only extent there is, is not)."""
    ran = all(r.get("ok") or r.get("kind") == "meta_slow" for r in (base, other))
    a, b = base.get("inputs") or [], other.get("inputs") or []
    if not ran or base.get("state") != other.get("state") or len(a) != len(b):
        return False
    tensors = [(x, y) for x, y in zip(a, b, strict=True) if x[0] != "scalar"]
    scalars_same = all(x == y for x, y in zip(a, b, strict=True) if x[0] == "scalar")
    more = any(len(x[0]) >= 2 for x, _ in tensors)
    return (
        bool(tensors)
        and scalars_same
        and more
        and all(
            len(x[0]) == len(y[0]) >= 1 and x[0][0] != y[0][0] and x[0][1:] == y[0][1:] and x[1] == y[1]
            for x, y in tensors
        )
    )


def shape_info(reply: dict[str, Any]) -> dict[str, Any]:
    keys = ("input_bytes", "output_bytes", "state_bytes", "flops", "forward_ms", "validated")
    return {k: reply.get(k) for k in keys}


def _odd_near(x: float) -> int:
    n = max(1, round(x))
    return n if n % 2 else max(1, n - 1)


def ladder(value: int) -> list[int]:
    """Candidate values of a variable for an odd shape, best first (see the module docstring)."""
    if value >= LARGE:
        target = 0.75 * value
        out = [m * _odd_near(target / m) for m in _LADDER]
        out += [_odd_near(target) - 2, _odd_near(target) + 2]
    elif value >= 4 and value % 2 == 0:
        out = [value - 1, value + 1]
    else:
        out = []
    seen: list[int] = []
    for v in out:
        if v >= 1 and v != value and v not in seen:
            seen.append(v)
    return seen


def scaled_value(value: int, factor: float) -> int:
    """``value * factor``, at least ``min(value, LARGE)``, aligned like the file's value (to at most 16)."""
    if factor >= 1.0:
        return value
    x = max(MIN_SCALED, round(value * factor))
    align = math.gcd(value, 16)
    while align > 1 and x < 8 * align:  # relative rounding: 40 stays 40 rather than jumping to 32 or 48
        align //= 2
    return min(value, max(align, round(x / align) * align))
