"""What a run request asks of a worker's trials and timing: one record per correctness trial, one timing plan.

The parent fills them from its :class:`~musaenv.evaluator.plan.EvalPlan` and its
:class:`~musaenv.config.TimingConfig` (:mod:`musaenv.evaluator.local`, :mod:`musaenv.evaluator.reference`); the
candidate and reference workers read their fields (:mod:`musaenv.worker.harness`, :mod:`musaenv.worker.trials`).
They travel inside :class:`~musaenv.isolation.messages.RunRequest` and are decoded with it, strictly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from musaenv.isolation.records import Message

__all__ = ["TimingPlan", "TrialSpec"]


@dataclass(frozen=True)
class TrialSpec(Message):
    """One correctness trial: the shape, the seed its inputs are drawn from, and for a stress trial the transform."""

    shape_index: int
    """Index into the request's shapes."""
    seed: int
    """The inputs' seed (secret to the candidate until the request: :mod:`musaenv.evaluator.plan`)."""
    scale: float | None = None
    """A stress trial's scale of every floating-point input (``None``: an ordinary trial)."""
    offset: float = 0.0
    """A stress trial's offset, added after the scale."""
    stats: bool = False
    """The reference sends only the outputs' statistics (a probed timed call), no arrays."""

    @property
    def key(self) -> tuple[int, int, float, float]:
        """(shape index, seed, scale, offset): what decides the trial's inputs (an ordinary trial: scale 1)."""
        return self.shape_index, self.seed, 1.0 if self.scale is None else self.scale, self.offset


@dataclass(frozen=True)
class TimingPlan(Message):
    """How a worker times its forward: the input pool, the calls, the cache flush, the baseline."""

    seed: int
    """The timing pool's first seed (entry ``i`` drawn from ``seed + i``)."""
    pool: int
    """Inputs in the timing pool."""
    warmup: int
    """Untimed calls first."""
    repeats: int
    """Timed calls (at most)."""
    max_time_s: float
    """Stop timing after this long, whatever ``repeats`` says."""
    flush_bytes: int
    """Bytes written before each timed call to flush the caches (0: no flush)."""
    keep: list[int] = field(default_factory=list)
    """Timed calls whose outputs are sent back and checked against the reference."""
    baseline: str = "eager"
    """The reference's timed baseline: ``eager`` or ``compile`` (torch.compile)."""
    paired: bool = False
    """The parent times each call beside the other worker (:mod:`musaenv.evaluator.pairing`)."""
    min_pairs: int = 0
    """Paired: pairs run before ``stop_width`` may end the timing (``TimingConfig.min_pairs``)."""
    stop_width: float = 0.0
    """Paired: stop once the speedup's interval is this narrow in log space (0: run ``repeats`` pairs)."""
