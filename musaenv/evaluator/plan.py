"""Seeds and trial layout of one evaluation, drawn in the parent (never guessable by the candidate)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from musaenv.config import EvalConfig
from musaenv.isolation.plans import TrialSpec
from musaenv.tasks.task import Shape, Task

__all__ = [
    "INTERPRETER_TIME_FACTOR",
    "EvalPlan",
    "StressTrial",
    "first_use_calls",
    "interpreted_config",
    "interpreter_shapes",
    "make_plan",
    "plan_pool",
]

RECHECK_CALLS = 2  # timed calls whose outputs are checked again against the reference (HACKS S11-S13)
# Further timed calls, picked after the run, whose output fingerprints are checked: TimingConfig.probes (4), the
# default here. Each costs the reference a draw and a forward (~15 ms on l1_relu's CPU tier); four catch a cheat
# that fakes half of the 17 unchecked calls of 20 (enough to move the median) 98.5 % of the time, two 79 %. When
# the eager reference is timed in the same run (reference="every"), every timed call is checked.
PROBE_CALLS = 4
#: Triton's CPU interpreter runs a launch's program instances one after another in Python (0.1-1 ms each,
#: docs/backends.md), so a kernel a GPU runs in microseconds takes seconds there: a correct public generation with
#: 12,900 program instances per launch needed 75 CPU s for 2 trials against the 60 s run limit and was charged a
#: timeout; with the default 5 trials, and the kernelbench policy's three profiled forwards, it used up 4x the limit
#: (240 CPU s) as well. Trials on the interpreter get this many times the run limit; an endless kernel is still a
#: timeout, judged after as long.
INTERPRETER_TIME_FACTOR = 8.0

# Stress trials (docs/verification.md, "Stress trials"): the task's inputs with every floating-point tensor
# transformed as x * scale + offset, two kinds in turn. Numbers from a simulation of the layernorm task (fp32,
# tolerance 1e-4, inputs of spread 2, hidden 512 and 1000, 21 to 4096 rows), as a share of the tolerance:
# * offset trials: scale 8-16, offset 32-48 times the scale. The mean is then 16-24 times the spread: a one-pass
#   variance E[x^2] - E[x]^2 in fp32 misses by 1.6-7 tolerances, a naive two-pass kernel summing in fp32 stays at
#   0.2-0.65 and the fp32 reference at 0.06. (Offset 1000 at scale 1 is too far: there the reference's own rounding
#   takes 0.6 of the tolerance and an honest fp32 two-pass kernel 5 tolerances.) Values of 256-768 overflow exp()
#   (past 88.7 in fp32): a softmax without its max subtracted gives inf / inf = NaN.
# * scale trials: scale 50-100, no offset. exp() overflows on any row holding a value above 1.77 (scale 50): 3.8 %
#   of randn values, so nearly every row of 64 or more. A relative error of a stable kernel does not move.
OFFSET_TRIAL_SCALE = (8.0, 16.0)
OFFSET_IN_SCALES = (32.0, 48.0)
SCALE_RANGE = (50.0, 100.0)


@dataclass(frozen=True)
class StressTrial:
    """A correctness trial on transformed inputs: every floating-point input tensor becomes ``x * scale + offset``
    (integer and bool inputs stay as drawn), in the candidate's and the reference's worker alike.

    Attributes:
        shape_index: The tier's shape the inputs are drawn at.
        seed: Input seed (as for an ordinary trial).
        scale: Multiplies every floating-point input.
        offset: Added after the scale.
    """

    shape_index: int
    seed: int
    scale: float
    offset: float

    def describe(self) -> str:
        """The transform in words, for feedback (``inputs scaled by 52 and offset by 0``)."""
        return f"inputs scaled by {self.scale:.3g} and offset by {self.offset:.3g}"


@dataclass(frozen=True)
class EvalPlan:
    """Everything random about one evaluation.

    Attributes:
        shapes: The tier's shapes (index 0 is the timing shape).
        init_seed: Seed for ``get_init_inputs()``; ``init_seed + 1`` seeds the parameters of both models.
        trials: (shape index, input seed) per correctness trial.
        timing_seed: Timed call ``i`` uses inputs drawn with ``timing_seed + i % timing_pool``.
        timing_pool: Number of distinct timing inputs.
        keep: Timed call indices whose outputs are rechecked (the last timed call is rechecked as well).
        probe_seed: Picks, after the run, the timed calls whose output fingerprints are checked; never sent to
            the worker, so the candidate cannot know which calls will be looked at.
        stress: Trials on scaled or offset inputs (:class:`StressTrial`), run after ``trials``; their seeds and
            transforms are as secret as the other seeds.
        call_seeds: Per timed call, the seed its inputs were drawn from, when the parent picked them during paired
            timing (set after the run); they replace ``timing_seed + i % timing_pool``.
    """

    shapes: tuple[Shape, ...]
    init_seed: int
    trials: tuple[tuple[int, int], ...]
    timing_seed: int
    timing_pool: int
    keep: tuple[int, ...]
    probe_seed: int = 0
    stress: tuple[StressTrial, ...] = ()
    call_seeds: tuple[int, ...] = field(default=(), repr=False)  # not in the draw id: trials drawn ahead serve

    def probe_calls(self, n_calls: int, exclude: Sequence[int], count: int = PROBE_CALLS) -> list[int]:
        """Up to ``count`` of the ``n_calls`` timed calls, outside ``exclude``, drawn from ``probe_seed``."""
        pool = [i for i in range(n_calls) if i not in set(exclude)]
        if not pool:
            return []
        rng = np.random.default_rng(np.random.SeedSequence(self.probe_seed))
        return sorted(int(i) for i in rng.choice(pool, size=min(count, len(pool)), replace=False))

    def recheck_trials(self, calls: Sequence[int] | None = None) -> list[tuple[int, int]]:
        """Reference trials that reproduce the inputs of the rechecked timed calls (default: ``keep``)."""
        seeds = self.call_seeds
        calls = self.keep if calls is None else calls
        return [(0, seeds[i] if i < len(seeds) else self.timing_seed + i % self.timing_pool) for i in calls]

    @property
    def n_trials(self) -> int:
        """Correctness trials of the plan: the ordinary ones, then the stress trials."""
        return len(self.trials) + len(self.stress)

    def trial_specs(self, extra: list[tuple[int, int]] | None = None) -> list[TrialSpec]:
        """Trials as the worker protocol expects them: the ordinary ones, the stress trials (with ``scale`` and
        ``offset``), then ``extra``."""
        plain = [TrialSpec(k, s) for k, s in self.trials]
        stress = [TrialSpec(t.shape_index, t.seed, t.scale, t.offset) for t in self.stress]
        return plain + stress + [TrialSpec(k, s) for k, s in extra or []]


def first_use_calls(n_calls: int, warmup: int, pool: int) -> list[int]:
    """Timed calls whose input no earlier call saw, warm-up included (warm-up call ``j`` uses pool entry
    ``pool - 1 - j % pool``, timed call ``i`` entry ``i % pool``; :func:`musaenv.timing.timers.time_forward`).

    Only these count for the reported time: a cache keyed on input content answers a repeated input for free, so a
    repeat measures the cache, not the kernel.
    """
    seen = {pool - 1 - j % pool for j in range(warmup)}
    fresh: list[int] = []
    for i in range(n_calls):
        if i % pool not in seen:
            fresh.append(i)
            seen.add(i % pool)
    return fresh


def _entropy(seed: int, secret: bool) -> list[int]:
    """The seed, plus 128 secret bits from ``os.urandom`` unless plans must be reproducible."""
    words = [int(seed) & 0xFFFFFFFFFFFFFFFF]
    if secret:
        words += list(np.frombuffer(os.urandom(16), dtype=np.uint32).tolist())
    return words


def interpreted_config(config: EvalConfig) -> EvalConfig:
    """``config`` for an evaluation on Triton's CPU interpreter: correctness only (interpreted speed says nothing of
    the kernel's: the speedup is ``None`` and a correct candidate scores 1, as it did at the ~0.015x the interpreter
    measured, without the timing stage that took most of the time and was the stage that timed out), and trials
    under :data:`INTERPRETER_TIME_FACTOR` times the run limit."""
    return config.replace(
        run_timeout_s=config.run_timeout_s * INTERPRETER_TIME_FACTOR, timing=config.timing.replace(enabled=False)
    )


def interpreter_shapes(task: Task, tier: str, chosen: bool) -> dict[str, Any]:
    """Which shapes an evaluation on Triton's CPU interpreter draws its trials at, and why (``EvalResult.extra``).

    Args:
        task: The task.
        tier: The evaluator's tier (``interp`` unless the user chose another).
        chosen: The user chose ``tier`` (``EvalConfig.tier``), rather than ``auto``.

    Returns:
        ``tier`` (the tier whose shapes were used; ``None``: the file's own sizes), ``shapes``, ``cpu_shapes``
        (the cpu tier's, for comparison) and ``why`` (a sentence).
    """
    used = task.tier_used(tier)
    shapes = [dict(s) for s in task.shapes_for(tier)]
    cpu = [dict(s) for s in task.shapes_for("cpu")]
    notes = [n for n in task.notes if n.startswith("interp tier:")]
    if chosen and tier != "interp":
        why = f"the {tier} tier, as EvalConfig.tier chose"
    elif used == "interp":
        why = (
            f"judged at interpreter-sized shapes {shapes} (the cpu tier's are {cpu}): Triton's CPU interpreter runs "
            "a launch's program instances one after another, so the shapes are shrunk to ShapeConfig.interp_bytes "
            "of inputs + outputs and ShapeConfig.interp_flops per call; the reference ran at the same shapes"
        )
    elif notes:
        why = f"the cpu tier's shapes ({notes[-1]})"
    else:
        why = "the cpu tier's shapes: the task has no interp tier (built-in tasks are sized for the interpreter)"
    return {"tier": used, "shapes": shapes, "cpu_shapes": cpu, "why": why}


def plan_pool(config: EvalConfig) -> int:
    """Distinct timing inputs of an evaluation: one per warm-up and timed call up to 16 (each is a full input
    set; 16 bounds the memory); calls past that reuse inputs and do not count for the median (first_use_calls)."""
    return max(1, min(config.timing.repeats + config.timing.warmup, 16))


def make_plan(task: Task, tier: str, config: EvalConfig, seed: int) -> EvalPlan:
    """Draw an evaluation plan from ``seed`` (via :class:`numpy.random.SeedSequence`), mixed with a secret from
    ``os.urandom`` unless ``config.secret_plans`` is off (then the same seed gives the same plan)."""
    shapes = task.shapes_for(tier)
    rng = np.random.default_rng(np.random.SeedSequence(_entropy(seed, config.secret_plans)))
    draws = [int(x) for x in rng.integers(0, 2**31 - 1, size=config.num_trials + 2)]
    # Round-robin over shapes so every shape gets a trial when num_trials >= len(shapes).
    trials = tuple((i % len(shapes), draws[i]) for i in range(config.num_trials))
    timing = config.timing
    pool = plan_pool(config)
    span = max(1, min(timing.repeats, 10))
    keep = tuple(sorted({int(x) for x in rng.choice(span, size=min(RECHECK_CALLS, span), replace=False)}))
    probe_seed = int(rng.integers(0, 2**31 - 1))
    stress = _stress_trials(rng, len(shapes), config.stress_count)  # drawn last: the other draws stay as they were
    return EvalPlan(shapes, draws[-2], trials, draws[-1], pool, keep if timing.enabled else (), probe_seed, stress)


def _stress_trials(rng: np.random.Generator, n_shapes: int, count: int) -> tuple[StressTrial, ...]:
    """``count`` stress trials, offset and scale kinds in turn, round-robin over the shapes (ranges above)."""
    out = []
    for j in range(count):
        seed = int(rng.integers(0, 2**31 - 1))
        if j % 2 == 0:
            scale = round(float(rng.uniform(*OFFSET_TRIAL_SCALE)), 2)
            offset = round(scale * float(rng.uniform(*OFFSET_IN_SCALES)), 2)
        else:
            scale, offset = round(float(rng.uniform(*SCALE_RANGE)), 2), 0.0
        out.append(StressTrial(j % n_shapes, seed, scale, offset))
    return tuple(out)
