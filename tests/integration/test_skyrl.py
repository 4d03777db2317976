"""KernelGen-v0 through SkyRL-gym's own registry and ``make``, driven the way SkyRL's generator drives text envs."""

from __future__ import annotations

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from musaenv.config import EvalConfig, TimingConfig  # noqa: E402
from musaenv.rl.dataset import dataset_rows  # noqa: E402
from tests.integration.hazards import hazard_candidate  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
FAST = EvalConfig(static_policy="off", run_timeout_s=30.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))


@pytest.fixture(scope="module")
def make():
    from musaenv.rl.adapters import skyrl

    yield lambda **extras: skyrl_gym.make(
        "musaenv", env_config={"backend": "cpu", "max_turns": 2, "eval_config": FAST.to_dict()}, extras=extras
    )
    skyrl.close_shared_evaluators()


def test_registered_and_a_failed_then_correct_episode(make) -> None:
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    assert "musaenv" in skyrl_gym.envs.registration.registry
    row = dataset_rows(["l1_relu"], backend="cpu")[0]
    assert row["env_class"] == "musaenv"
    env = make(**{k: v for k, v in row.items() if k != "prompt"})
    assert isinstance(env, BaseTextEnv)
    prompt, meta = env.init(row["prompt"])
    assert prompt == row["prompt"] and meta == {"task_id": "l1_relu"}
    out = env.step("no code in this answer")
    assert not out["done"] and out["reward"] == -1.0  # PrimeEcho pays online: R_1 = s_1 if SkyRL stops here
    first = out["reward"]
    (msg,) = out["observations"]
    assert msg["role"] == "user" and msg["content"].startswith("Verdict: format_error")
    out = env.step(hazard_candidate("relu_ok"))
    assert out["done"] and out["observations"] == [] and out["metadata"]["eval"]["stage"] == "correct"
    # PrimeEcho (alpha 0.75): the failed first turn weighs most, the later success lifts it above -1
    ret = first + out["reward"]
    assert ret == pytest.approx(out["metadata"]["episode_return"]) and -1.0 < ret < 0
    assert env.get_metrics() == {"turns": 2, "first_score": -1.0, "solved": 1.0}
    env.close()


def test_an_empty_prompt_becomes_the_task_prompt_and_a_first_turn_success_pays_most(make) -> None:
    env = make(extra_info={"task": "l1_relu"}, seed=3)
    prompt, _ = env.init([])
    assert len(prompt) == 1 and prompt[0]["role"] == "user" and "ModelNew" in prompt[0]["content"]
    out = env.step(hazard_candidate("relu_ok"))
    assert out["done"] and out["reward"] > 1.0  # s_1 >= 1 plus PrimeEcho's first-turn bonus
    env.close()


def test_the_rows_max_turns_is_the_turn_limit(make) -> None:
    """SkyRL passes the row's turn limit in ``extras["max_turns"]`` (its own envs read it there): it wins over the
    env config's 2, here 1, so a first failed turn already ends the episode."""
    row = dataset_rows(["l1_relu"], backend="cpu", max_turns=1)[0]
    assert row["max_turns"] == 1
    env = make(**{k: v for k, v in row.items() if k != "prompt"})
    assert env.max_turns == 1
    env.init(row["prompt"])
    out = env.step("no code in this answer")
    assert out["done"] and out["observations"] == [] and out["reward"] == pytest.approx(-1.0)
    env.close()
    nested = make(extra_info={"task": "l1_relu", "max_turns": 3})
    assert nested.max_turns == 3
    nested.close()
    assert make(task="l1_relu").max_turns == 2  # no row limit: the env config's
