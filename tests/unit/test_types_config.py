"""EvalResult/TimingStats records and configs: JSON round-trips and validation users rely on."""

from __future__ import annotations

import json
import math

import pytest

from musaenv.config import EnvConfig, EvalConfig, RewardConfig, SandboxConfig, TimingConfig
from musaenv.errors import ConfigError, MusaEnvError
from musaenv.types import EvalResult, Stage, TimingStats


def test_timing_stats_quantiles():
    s = TimingStats.from_samples([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.median_ms, s.min_ms, s.max_ms, s.n) == (3.0, 1.0, 5.0, 5)
    assert s.mean_ms == 3.0
    assert s.std_ms == pytest.approx(math.sqrt(2.0))
    assert s.q20_ms == pytest.approx(1.8)
    with pytest.raises(ValueError):
        TimingStats.from_samples([])


def test_eval_result_json_round_trip():
    r = EvalResult(
        stage=Stage.CORRECT,
        task_id="t",
        trials_passed=5,
        trials_total=5,
        speedup=1.5,
        timing=TimingStats.from_samples([1.0, 2.0]),
        flags=("a",),
        extra={"k": [1]},
    )
    d = json.loads(json.dumps(r.to_dict()))
    assert d["stage"] == "correct" and d["pass_fraction"] == 1.0
    assert EvalResult.from_dict(d) == r


def test_non_finite_floats_become_none():
    d = EvalResult(stage=Stage.INCORRECT, max_abs_error=float("nan"), speedup=float("inf")).to_dict()
    assert d["max_abs_error"] is None and d["speedup"] is None
    json.dumps(d, allow_nan=False)


def test_stage_values_are_the_documented_set():
    assert {s.value for s in Stage} == {
        "format_error",
        "compile_error",
        "runtime_error",
        "timeout",
        "incorrect",
        "cheating",
        "compiled",
        "correct",
        "infra_error",
    }


def test_env_config_round_trip_with_nested():
    cfg = EnvConfig(
        max_turns=2, eval=EvalConfig(num_trials=3, timing=TimingConfig(repeats=7)), reward=RewardConfig(shaper="best")
    )
    assert EnvConfig.from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize(
    "make",
    [
        lambda: EnvConfig(max_turns=0),
        lambda: EvalConfig(num_trials=0),
        lambda: EvalConfig(tier="tpu"),
        lambda: EvalConfig(static_policy="lax"),
        lambda: TimingConfig(repeats=0),
        lambda: TimingConfig(min_pairs=2),
        lambda: TimingConfig(stop_width=-0.1),
        lambda: SandboxConfig(max_open_files=3),
        lambda: RewardConfig(speedup_weight=-1),
        lambda: EvalConfig(atol=-1.0),
        lambda: EvalConfig(stress_trials=-1),
        lambda: EvalConfig(stress_trials=True),
    ],
)
def test_bad_config_values_raise_config_error(make):
    with pytest.raises(ConfigError) as e:
        make()
    assert isinstance(e.value, MusaEnvError) and "expected" in str(e.value)


def test_stress_trials_follow_the_policy_unless_set_and_round_trip():
    # on under strict; off under kernelbench, whose numbers must stay comparable with KernelBench's own checker
    assert EvalConfig().stress_count == 2 and EvalConfig(static_policy="kernelbench").stress_count == 0
    assert EvalConfig(static_policy="kernelbench", stress_trials=3).stress_count == 3
    assert EvalConfig(stress_trials=0).stress_count == 0
    cfg = EvalConfig(stress_trials=4)
    assert EvalConfig.from_json(cfg.to_json()) == cfg
    assert EvalConfig.from_json(EvalConfig().to_json()).stress_trials is None


def test_unknown_config_key_is_rejected():
    with pytest.raises(ConfigError, match="known keys"):
        EvalConfig.from_dict({"num_trails": 3})
