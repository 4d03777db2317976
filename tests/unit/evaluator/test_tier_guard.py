"""The input memory guard: skipped where nothing is drawn, a fallback to the CPU tier where ``tier="auto"`` chose a
GPU tier that cannot fit, and a refusal naming ``--tier cpu`` where the user chose it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from musaenv.backends import BackendInfo
from musaenv.config import EvalConfig
from musaenv.errors import ConfigError
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.task import Task

# A KernelBench-sized task: 8 GiB a call at the GPU tier, 4 MiB at the derived CPU tier.
BIG = Task(id="level1/big", level=1, source="", footprint_bytes={"gpu": (8 << 30,), "cpu": (4 << 20,)})


def _tier(backend: BackendInfo, tier: str = "auto") -> str:
    """The tier ``LocalEvaluator._tier_for`` picks (no workers started: only the plan's decision)."""
    config = EvalConfig(tier=tier)
    me = SimpleNamespace(backend=backend, config=config, tier=backend.tier if tier == "auto" else tier)
    return LocalEvaluator._tier_for(me, BIG)  # type: ignore[arg-type]


def test_compile_only_draws_nothing_so_no_guard():
    assert _tier(BackendInfo("cuda", "cpu", "gpu", compile_only=True)) == "gpu"


def test_auto_tier_that_cannot_fit_falls_back_to_the_cpu_tier():
    assert _tier(BackendInfo("cuda", "cuda", "gpu")) == "cpu"


def test_a_chosen_tier_that_cannot_fit_names_the_flag():
    with pytest.raises(ConfigError, match="--tier cpu"):
        _tier(BackendInfo("cuda", "cuda", "gpu"), tier="gpu")


def test_the_interpreters_tier_is_guarded_by_the_cpu_tiers_bytes_without_its_own():
    assert _tier(BackendInfo("triton", "cpu", "interp")) == "interp"
