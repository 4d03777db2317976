"""Vector envs of KernelGen-v0: async out of the box (Text through shared memory), one shared evaluator in-process."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import musaenv  # noqa: F401  (registers the env ids)
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.pool import EvaluatorPool
from musaenv.vector import KernelGenVectorEnv
from tests.integration.hazards import hazard_candidate

FAST = EvalConfig(static_policy="off", timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))


def _single_obs() -> str:
    env = gym.make("KernelGen-v0", backend="cpu", task="l1_relu")
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


def test_async_make_vec_carries_full_text_observations() -> None:
    expected = _single_obs()
    envs = gym.make_vec("KernelGen-v0", num_envs=2, vectorization_mode="async", backend="cpu", task="l1_relu")
    try:
        obs, _ = envs.reset(seed=0)
        assert list(obs) == [expected, expected]
        obs, rewards, terminated, truncated, info = envs.step(["no code here", "still no code"])
        assert all("Verifier feedback on attempt 1" in o and "format_error" in o for o in obs)  # not stale
        assert list(rewards) == [-1.0, -1.0] and not terminated.any() and not truncated.any()  # PrimeEcho's R_1
        assert list(info["eval"]["stage"]) == ["format_error", "format_error"]
    finally:
        envs.close()


def test_default_make_vec_shares_one_evaluator() -> None:
    envs = gym.make_vec("KernelGen-v0", num_envs=3, backend="cpu", task="l1_relu")
    try:
        assert isinstance(envs, KernelGenVectorEnv)
        obs, _ = envs.reset(seed=1)
        assert len(obs) == 3 and obs[0] == _single_obs()
        evaluators = {id(e.unwrapped.evaluator) for e in envs.envs}
        assert len(evaluators) == 1
        assert isinstance(envs.envs[0].unwrapped.evaluator, EvaluatorPool)
        _, rewards, _, _, info = envs.step(["x", "y", "z"])
        assert np.all(rewards == -1.0) and list(info["eval"]["stage"]) == ["format_error"] * 3
    finally:
        envs.close()


def test_sync_make_vec_can_share_a_pool() -> None:
    with EvaluatorPool("cpu", FAST, compile_workers=1) as pool:
        envs = gym.make_vec("KernelGen-v0", num_envs=2, vectorization_mode="sync", backend="cpu", task="l1_relu",
                            evaluator=pool)  # fmt: skip
        envs.reset(seed=0)
        assert isinstance(envs, gym.vector.SyncVectorEnv)
        assert all(e.unwrapped.evaluator is pool for e in envs.envs)
        envs.close()


@pytest.mark.slow
def test_vector_step_evaluates_real_candidates_concurrently() -> None:
    envs = gym.make_vec("KernelGen-v0", num_envs=2, backend="cpu", task="l1_relu", eval_config=FAST, max_turns=2)
    try:
        envs.reset(seed=0)
        obs, rewards, terminated, _, info = envs.step([hazard_candidate("relu_ok"), hazard_candidate("relu_wrong")])
        assert list(info["eval"]["stage"]) == ["correct", "incorrect"]
        assert list(terminated) == [True, False] and rewards[0] > 0
        assert "Verifier feedback on attempt 1" in obs[1]
    finally:
        envs.close()
