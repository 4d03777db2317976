"""End to end on the CPU backend: real g++, real torch extension loader, real worker processes."""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import musaenv
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.isolation.channel import Channel
from musaenv.isolation.messages import PairedRequest, TimeEnd
from musaenv.tasks.builtin import get_task
from musaenv.tasks.task import load_task_file
from musaenv.types import Stage
from tests.integration.hazards import COMPILE_ERROR_CANDIDATE, hazard_candidate

pytestmark = pytest.mark.slow

FAST = EvalConfig(
    run_timeout_s=20.0,
    load_timeout_s=60.0,
    timing=TimingConfig(repeats=5, warmup=1, max_time_s=1.0),
)


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator("cpu", FAST)
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def relu():
    return get_task("l1_relu")


def test_correct_then_cached(evaluator, relu):
    first = evaluator.evaluate(relu, hazard_candidate("relu_ok"), seed=1)
    assert first.stage is Stage.CORRECT, first.to_dict()
    assert first.trials_passed == first.trials_total == FAST.num_trials + FAST.stress_count  # 5 + 2 stress trials
    assert first.speedup is not None and first.speedup > 0
    again = evaluator.evaluate(relu, hazard_candidate("relu_wrong"), seed=2)  # same C++ source: a cache hit
    assert again.build_cached is True
    assert again.compile_time_s == 0.0


def test_reference_paired_by_default_cached_on_a_dedicated_host_or_beside_every_candidate(evaluator, relu):
    paired = [evaluator.evaluate(relu, hazard_candidate("relu_ok"), seed=s) for s in (9, 10)]
    for r in paired:  # the default: timed call by call beside each candidate, the speedup with its interval
        assert r.stage is Stage.CORRECT and r.ref_timing is not None, r.to_dict()
        assert r.timing_pairs == r.timing.n == r.ref_timing.n >= 3
        assert r.speedup_low is not None and r.speedup_high is not None
        assert r.speedup_low <= r.speedup <= r.speedup_high
        assert r.extra["cores_awake"] in ("cpus", "global", False)  # how idle timing cores polled (evaluator.awake)
        assert "remeasure_ms" not in r.extra["runtime"]  # the parent clocked every call: no in-process second clock
        cost = r.extra["timing_cost"]  # where the pairing's time went, per side (benchmarks/defence_cost.py)
        assert cost["calls"] == r.timing_pairs, cost
        for side in ("reference", "candidate"):
            assert cost[side]["prepare"] > 0 and cost[side]["window"] >= cost[side]["handshake"] >= 0, cost
    assert paired[0].ref_timing != paired[1].ref_timing
    host = FAST.replace(timing=FAST.timing.replace(reference="dedicated_host"))
    with LocalEvaluator("cpu", host) as ev:
        cached = [ev.evaluate(relu, hazard_candidate("relu_ok"), seed=s) for s in (11, 12)]
    assert cached[0].ref_timing is not None and cached[0].ref_timing == cached[1].ref_timing  # measured once
    assert cached[0].timing_pairs == 0 and cached[0].speedup_low is None
    assert all(r.extra["runtime"]["remeasure_ms"] > 0 for r in cached)  # the worker's own samples: re-measured
    cached = [r.ref_timing for r in cached]
    every = FAST.replace(timing=FAST.timing.replace(reference="every"))
    with LocalEvaluator("cpu", every) as ev:
        fresh = [ev.evaluate(relu, hazard_candidate("relu_ok"), seed=s) for s in (13, 14)]
    assert all(r.stage is Stage.CORRECT and r.ref_timing is not None for r in fresh)
    assert fresh[0].ref_timing != fresh[1].ref_timing != cached[0]  # timed again beside each candidate


def test_the_reference_warms_up_ahead_and_an_unused_warm_up_is_ended_cleanly(relu, monkeypatch):
    """The paired request goes to the reference when the candidate's trials begin (its model built and warmed on the
    untimed cores meanwhile), once: the pairing uses it. A candidate that raises in its trials leaves it unused; the
    next request ends it with ``time_end`` and the same reference worker serves on."""
    sent: list[tuple[Channel, str]] = []
    send = Channel.send

    def spy(self, msg, arrays=None, give_up=None):
        sent.append((self, str(msg.get("type"))))
        return send(self, msg, arrays, give_up)

    monkeypatch.setattr(Channel, "send", spy)
    with LocalEvaluator("cpu", FAST) as ev:
        first = ev.evaluate(relu, hazard_candidate("relu_ok"), seed=31)
        assert first.stage is Stage.CORRECT and first.timing_pairs >= 3, first.to_dict()
        worker = ev._reference._worker
        to_ref = lambda: [kind for chan, kind in sent if chan is worker.chan]  # noqa: E731
        assert to_ref().count(PairedRequest.TYPE) == 1, to_ref()
        raised = ev.evaluate(relu, hazard_candidate("throws"), seed=32)
        assert raised.stage is Stage.RUNTIME_ERROR, raised.to_dict()
        assert to_ref().count(PairedRequest.TYPE) == 2, to_ref()
        again = ev.evaluate(relu, hazard_candidate("relu_ok"), seed=33)
        assert again.stage is Stage.CORRECT and again.timing_pairs >= 3, again.to_dict()
        kinds = to_ref()
        unused = kinds.index(PairedRequest.TYPE, kinds.index(PairedRequest.TYPE) + 1)
        assert kinds[unused + 1 : unused + 3] == [TimeEnd.TYPE, "draw"], kinds  # ended before the next request
        assert kinds.count(PairedRequest.TYPE) == 3, kinds
        assert ev._reference._worker is worker  # ended by the protocol, not by a restart


def test_torch_compile_baseline_and_its_fallback(relu, tmp_path):
    every = FAST.timing.replace(reference="every", baseline="compile")  # "every": compiled in each run
    with LocalEvaluator("cpu", FAST.replace(timing=every)) as ev:
        r = ev.evaluate(relu, hazard_candidate("relu_ok"), seed=21)
    assert r.stage is Stage.CORRECT and r.speedup is not None, r.to_dict()
    assert "baseline_eager_fallback" not in r.warnings
    # torch.compile failing on the reference (here: inductor finds no working C++ compiler) keeps the verdict
    # and times the eager reference, saying so.
    broken = {"CXX": "/bin/false", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    with LocalEvaluator("cpu", FAST.replace(timing=every), worker_env=broken) as ev:
        r = ev.evaluate(relu, hazard_candidate("relu_ok"), seed=22)
    assert r.stage is Stage.CORRECT and r.speedup is not None, r.to_dict()
    assert "baseline_eager_fallback" in r.warnings
    assert any("torch.compile failed" in m for m in r.messages), r.messages


def test_stateful_reference_is_refused_with_a_reason(evaluator):
    # An honest kernel on a reference that keeps state between calls used to be called a cheat (its repeat and
    # timed outputs differ from a reference that has moved on); the task itself is refused instead.
    stateful = load_task_file(Path(__file__).parents[1] / "data" / "tasks" / "stateful_relu.py")
    r = evaluator.evaluate(stateful, hazard_candidate("relu_ok"), seed=5)
    assert r.stage is Stage.INFRA_ERROR, r.to_dict()
    assert "differs between two calls" in r.messages[0] and "keeps state" in r.messages[0]


def test_wrong_math_is_incorrect(evaluator, relu):
    r = evaluator.evaluate(relu, hazard_candidate("relu_wrong"), seed=3)
    assert r.stage is Stage.INCORRECT
    assert r.trials_passed == 0 and r.max_abs_error is not None and r.max_abs_error > 0.1
    assert any("outside atol" in m for m in r.messages)


def test_cpp_exception_is_runtime_error(evaluator, relu):
    r = evaluator.evaluate(relu, hazard_candidate("throws"), seed=4)
    assert r.stage is Stage.RUNTIME_ERROR
    assert "kernel exploded on purpose" in r.runtime_log


def test_segfault_is_runtime_error(evaluator, relu):
    r = evaluator.evaluate(relu, hazard_candidate("segfault"), seed=5)
    assert r.stage is Stage.RUNTIME_ERROR
    assert "SIGSEGV" in r.runtime_log


def test_infinite_loop_times_out_and_env_recovers(evaluator, relu):
    r = evaluator.evaluate(relu, hazard_candidate("spin"), seed=6)
    assert r.stage is Stage.TIMEOUT
    assert "trials" in r.runtime_log
    after = evaluator.evaluate(relu, hazard_candidate("relu_ok"), seed=7)
    assert after.stage is Stage.CORRECT


def test_compile_error_carries_compiler_output(evaluator, relu):
    r = evaluator.evaluate(relu, COMPILE_ERROR_CANDIDATE, seed=8)
    assert r.stage is Stage.COMPILE_ERROR
    assert "error" in r.compiler_log.lower()
    again = evaluator.evaluate(relu, COMPILE_ERROR_CANDIDATE, seed=9)
    assert again.stage is Stage.COMPILE_ERROR and again.compiler_log == r.compiler_log


def test_wrong_constructor_signature(evaluator, relu):
    r = evaluator.evaluate(relu, hazard_candidate("relu_ok", init_args=", a, b"), seed=10)
    assert r.stage is Stage.RUNTIME_ERROR
    assert "TypeError" in r.runtime_log


BAD_INPUTS = {
    "empty": "",
    "blank": " \n ",
    "5MB": "x" * 5_000_000,
    "binary-str": "\x00\x01\x02binary\xff",
    "bytes": b"\x00\xff bytes",
    "prose": "no code here",
    "no-ModelNew": "```python\nprint(1)\n```",
    "syntax": "```python\nclass ModelNew(:\n```",
    "None": None,
}


@pytest.mark.parametrize("response", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_bad_input_is_a_fast_format_error(evaluator, relu, response):
    start = time.perf_counter()
    r = evaluator.evaluate(relu, response, seed=0)  # type: ignore[arg-type]
    assert r.stage is Stage.FORMAT_ERROR
    assert r.messages
    assert time.perf_counter() - start < 2.0  # answered without compiling (a compile takes 15 s or more)


def test_episode_rewards_follow_primeecho(evaluator):
    env = gym.make("KernelGen-v0", task="l1_relu", backend="cpu", max_turns=3, evaluator=evaluator)
    obs, info = env.reset(seed=0)
    assert "class Model" in obs and info["turn"] == 0
    obs, r1, term, trunc, info = env.step(COMPILE_ERROR_CANDIDATE)
    assert (r1, term, trunc) == (-1.0, False, False)  # paid online: R_1 = 0.75 s_1 + 0.25 s_1
    assert info["eval"]["stage"] == "compile_error" and info["score"] == -1.0
    assert "Verifier feedback on attempt 1" in obs and "compile_error" in obs
    obs, r2, term, trunc, info = env.step(hazard_candidate("relu_ok"))
    assert term and not trunc
    s2 = info["score"]
    assert s2 is not None and s2 >= 1.0
    # PrimeEcho: R = 0.75 * s1 + 0.25 * max(s1, s2) + B2 (turn 1 failed, turn 2 succeeded)
    expected = 0.75 * -1.0 + 0.25 * s2 + 0.1
    assert r2 == pytest.approx(expected - r1)  # R_2 - R_1
    assert info["episode_return"] == pytest.approx(expected) == r1 + r2
    assert info["paid_rewards"] == [r1, r2] and info["turn_rewards"] == pytest.approx([expected, 0.0])
    assert info["loss_weights"] == [1.0, 0.0]
    env.close()


def test_check_env_passes():
    env = gym.make("KernelGen-v0", backend="cpu")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_env_ids_registered():
    assert set(musaenv.ENV_IDS) <= set(gym.registry)
