"""The return is right whenever the episode ends: the env pays every shaper online.

Whoever ends an episode (KernelGen-v0 itself, ``gymnasium.wrappers.TimeLimit``, ``max_episode_steps``, a server
session closed after turn 1, a trainer that stops calling the tool), the rewards paid so far sum to the shaper's
return of the turns played, and a ``format_error`` episode never returns more than a repaired one. The envs and
adapters are the real ones; only the evaluator is a double (verdicts scripted by response text), so nothing compiles.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.wrappers import TimeLimit

import musaenv  # noqa: F401 - registers the env ids
from musaenv.env import KernelGenEnv
from musaenv.rewards import available_shapers, make_shaper
from musaenv.rl.adapters.openenv_server import KernelGenHTTPServer, OpenEnvSession
from musaenv.rl.adapters.sb3 import DiscreteKernelEnv
from musaenv.rl.adapters.trl import close_trl_environment, make_trl_environment
from musaenv.types import EvalResult, Stage

FAST = EvalResult(Stage.CORRECT, trials_passed=5, trials_total=5, speedup=2.0)  # s = 1.5
NO_CODE = "I have no code yet."


class ScriptedEvaluator:
    """Evaluator double: "ok" is correct at 2x, "slow" correct at 0.5x, anything else a format error."""

    tier = "cpu"

    def evaluate(self, task: Any, response: str, seed: int = 0) -> EvalResult:
        if response == "ok":
            return FAST.replace(task_id=task.id, backend="cpu")
        if response == "slow":
            return FAST.replace(task_id=task.id, backend="cpu", speedup=0.5)
        return EvalResult(Stage.FORMAT_ERROR, task_id=task.id, backend="cpu", messages=("no code block",))

    def close(self) -> None:
        pass


def _play(env: gym.Env, responses: list[str]) -> tuple[list[float], list[float | None], dict[str, Any]]:
    env.reset(seed=0)
    paid: list[float] = []
    scores: list[float | None] = []
    info: dict[str, Any] = {}
    for r in responses:
        _, reward, terminated, truncated, info = env.step(r)
        paid.append(float(reward))
        scores.append(info["score"])
        if terminated or truncated:
            break
    return paid, scores, info


@pytest.mark.parametrize("reward", available_shapers())
def test_time_limit_cuts_after_turn_1_and_the_return_is_the_shapers(reward: str) -> None:
    shaper = make_shaper(reward)
    env = TimeLimit(KernelGenEnv(task="l1_relu", reward=reward, max_turns=3, evaluator=ScriptedEvaluator()), 1)
    paid, scores, info = _play(env, [NO_CODE, "ok"])
    assert len(paid) == 1 and scores == [-1.0]  # the wrapper ended it, not the env
    assert sum(paid) == pytest.approx(shaper.episode_return(scores)) == pytest.approx(info["episode_return"])
    assert info["paid_rewards"] == paid and len(info["turn_rewards"]) == len(info["loss_weights"]) == 1
    repaired, rscores, _ = _play(TimeLimit(env.unwrapped, 2), [NO_CODE, "ok"])
    assert rscores == [-1.0, 1.5] and sum(repaired) == pytest.approx(shaper.episode_return(rscores))
    assert sum(paid) <= sum(repaired)


def test_primeecho_under_max_episode_steps_a_format_error_returns_minus_one() -> None:
    env = gym.make("KernelGen-v0", task="l1_relu", max_turns=3, evaluator=ScriptedEvaluator(), max_episode_steps=1)
    paid, _, _ = _play(env, [NO_CODE])
    assert paid == [-1.0]  # R_1 = 0.75 s_1 + 0.25 s_1; before, 0.0: more than a repaired episode
    env = gym.make("KernelGen-v0", task="l1_relu", max_turns=3, evaluator=ScriptedEvaluator(), max_episode_steps=2)
    repaired, _, info = _play(env, [NO_CODE, "slow"])
    assert repaired == pytest.approx([-1.0, 0.6])  # R_2 = -0.75 + 0.25 * 1.0 + B2 = -0.4
    assert info["turn_rewards"] == pytest.approx([-0.4, 0.0])  # the credit a trainer uses sits on turn 1
    assert sum(paid) < sum(repaired)


@pytest.fixture
def http_server() -> Iterator[KernelGenHTTPServer]:
    env = KernelGenEnv(task="l1_relu", max_turns=3, evaluator=ScriptedEvaluator())
    srv = KernelGenHTTPServer(("127.0.0.1", 0), OpenEnvSession(env))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def test_http_session_abandoned_after_turn_1_has_the_return_of_turn_1(http_server: KernelGenHTTPServer) -> None:
    base = http_server.url
    _post(f"{base}/reset", {"seed": 0})
    step = _post(f"{base}/step", {"action": {"code": NO_CODE}})
    assert step["done"] is False and step["reward"] == -1.0 and step["metadata"]["episode_return"] == -1.0
    with urllib.request.urlopen(f"{base}/state", timeout=30) as resp:
        assert json.loads(resp.read())["episode_return"] == -1.0
    _post(f"{base}/reset", {"seed": 1})  # the client walks away; a repaired episode for comparison
    rewards = [_post(f"{base}/step", {"action": {"code": c}})["reward"] for c in (NO_CODE, "ok")]
    assert step["reward"] < sum(rewards) == pytest.approx(make_shaper("primeecho").episode_return([-1.0, 1.5]))


def test_trl_rollout_stopped_after_one_submission() -> None:
    cls = make_trl_environment(task="l1_relu", max_turns=3, evaluator=ScriptedEvaluator())
    try:
        env = cls()
        env.reset(seed=0)
        env.submit_kernel(NO_CODE)  # TRL's max tool calls ends the rollout here
        assert not env.done and env.get_reward() == pytest.approx(-1.0) == env.last_info["episode_return"]
        env.reset(seed=0)
        env.submit_kernel(NO_CODE)
        env.submit_kernel("ok")
        assert env.done and env.get_reward() == pytest.approx(env.last_info["episode_return"])
        assert env.get_reward() > -1.0
    finally:
        close_trl_environment(cls)


def test_skyrl_trajectory_cut_after_turn_1() -> None:
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from musaenv.rl.adapters import skyrl  # noqa: F401 - registers "musaenv"

    config = {"backend": "cpu", "max_turns": 3, "evaluator": ScriptedEvaluator()}
    env = skyrl_gym.make("musaenv", env_config=config, extras={"task": "l1_relu"})
    env.init([])
    out = env.step(NO_CODE)  # SkyRL's own turn limit may stop the trajectory here
    assert not out["done"] and out["reward"] == -1.0 and out["metadata"]["episode_return"] == -1.0
    env.close()


def test_sb3_env_under_time_limit() -> None:
    inner = DiscreteKernelEnv(pool=None, tasks=("l1_relu",), evaluator=ScriptedEvaluator(), eval_seeds=None)
    env = TimeLimit(inner, max_episode_steps=1)
    env.reset(seed=0)
    prose = inner.pool.names.index("prose")
    _, reward, _, truncated, info = env.step(prose)
    assert truncated and reward == pytest.approx(-1.0) == info["episode_return"]


def test_musaenv_rollout_under_time_limit_keeps_the_shapers_credit() -> None:
    from musaenv.rl.protocol import Generation
    from musaenv.rl.rollout import run_episode

    env = TimeLimit(KernelGenEnv(task="l1_relu", max_turns=3, evaluator=ScriptedEvaluator()), max_episode_steps=1)
    episode = run_episode(env, policy=None, task_id="l1_relu", seed=0, first=Generation(NO_CODE))  # type: ignore[arg-type]
    assert [t.reward for t in episode.turns] == [-1.0] and [t.loss_weight for t in episode.turns] == [1.0]
    assert episode.return_ == make_shaper("primeecho").episode_return([-1.0])
