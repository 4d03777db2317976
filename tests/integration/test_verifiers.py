"""The ``musaenv-kernelgen`` taskset run by verifiers 0.4's own machinery against a scripted OpenAI-compatible model.

Everything between the model and the verifier is verifiers': ``vf-eval`` (or ``load_environment`` + ``serving`` +
``run_episode``) loads the taskset by id, the agent's chat harness (``null``, a uv-prepared script using the real
``openai`` client) runs in the ``subprocess`` runtime, its calls go through verifiers' interception server to the
stub in :mod:`tests.integration.openai_stub`, and verifiers' scoring records the reward. Runs where verifiers and
``uv`` are installed (CI: a venv of its own, since verifiers pins an ``mcp`` that openenv-core does not accept).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

vf = pytest.importorskip("verifiers.v1")
uv = pytest.importorskip("uv", reason="verifiers' subprocess runtime prepares its chat harness with uv")

from musaenv.env import KernelGenEnv  # noqa: E402
from musaenv.rl.adapters.verifiers_v1 import TASKSET_ID  # noqa: E402
from musaenv.types import EvalResult  # noqa: E402
from tests.integration.hazards import hazard_candidate  # noqa: E402
from tests.integration.openai_stub import ChatStub  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
FAST = {"static_policy": "off", "run_timeout_s": 30.0, "timing": {"repeats": 3, "warmup": 1, "max_time_s": 0.5}}
VF_EVAL = Path(sys.executable).with_name("vf-eval")  # the console script verifiers installs beside python
PROSE = "I am not sure how to write this kernel."


def _path_with_uv() -> str:
    """PATH with the uv binary's folder first: verifiers' runtime calls ``uv`` by name."""
    return os.path.dirname(uv.find_uv_bin()) + os.pathsep + os.environ.get("PATH", "")


def _prose_then_relu(messages: list[dict[str, Any]]) -> str:
    """The script: no code on the first turn, a correct ReLU once the verifier has answered."""
    return PROSE if sum(m["role"] == "user" for m in messages) == 1 else hazard_candidate("relu_ok")


def _expected_return(verdicts: list[dict[str, Any]], max_turns: int) -> float:
    """The return a plain KernelGen-v0 env's shaper gives these turns (PrimeEcho by default)."""
    env = KernelGenEnv(task="l1_relu", backend="cpu", max_turns=max_turns)
    try:
        scores = [v["score"] for v in verdicts]
        results = [EvalResult.from_dict(v["eval"]) for v in verdicts]
        return float(sum(env.shaper.episode_rewards(scores, results)))
    finally:
        env.close()


def test_vf_eval_feeds_the_verdict_back_and_scores_the_episode_return_once(tmp_path: Path) -> None:
    with ChatStub(_prose_then_relu) as stub:
        cmd = [str(VF_EVAL), TASKSET_ID, "-m", "stub-model",
               "--client.base-url", stub.base_url, "--client.api-key-var", "MUSAENV_STUB_KEY", "--no-push",
               "--no-rich", "-o", str(tmp_path), "--run.name", "kernelgen", "-n", "1", "-r", "2", "-c", "2",
               "--env.taskset.tasks", '["l1_relu"]', "--env.taskset.max-turns", "2",
               "--env.taskset.eval-config", json.dumps(FAST)]  # fmt: skip
        env = dict(os.environ, MUSAENV_STUB_KEY="sk-local-stub", PATH=_path_with_uv())
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = (tmp_path / "kernelgen" / "traces.jsonl").read_text().splitlines()
    assert len(lines) == 2  # two episodes of l1_relu, played at the same time
    # Multi-turn: each episode's second request carries the verifier's feedback as the newest user message.
    assert len(stub.requests) == 4 and all(r.get("stream") for r in stub.requests)  # the openai client streams
    seconds = [r["messages"] for r in stub.requests if len(r["messages"]) > 1]
    assert len(seconds) == 2 and all([m["role"] for m in s] == ["user", "assistant", "user"] for s in seconds)
    for line in lines:
        (trace,) = json.loads(line)["traces"]
        record = trace["info"]["musaenv"]
        assert trace["ok"] and record["verdicts"] == ["format_error", "correct"], (record, proc.stderr[-4000:])
        assert "format_error" in record["feedback"][0]
        assert [(m[1]["content"], m[2]["content"]) for m in seconds].count((PROSE, record["feedback"][0])) >= 1
        # The reward is the env's shaped return of these two turns, and the only reward (counted once).
        turns = zip(record["scores"], record["verdicts"])
        expected = _expected_return([{"score": s, "eval": {"stage": v, "task_id": "l1_relu"}} for s, v in turns], 2)
        assert list(trace["rewards"]) == ["kernelgen_return"]
        assert trace["rewards"]["kernelgen_return"]["score"] == pytest.approx(expected) == record["episode_return"]
        assert trace["metrics"]["solved"] == 1.0 and trace["metrics"]["submissions"] == 2.0


def test_an_episode_without_a_reply_scores_like_the_worst_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_with_uv())  # the subprocess runtime inherits this process's environment
    monkeypatch.setenv("MUSAENV_STUB_KEY", "sk-local-stub")
    with ChatStub(_prose_then_relu) as stub:
        taskset = {"id": TASKSET_ID, "tasks": ["l1_relu"], "eval_config": FAST}
        config = vf.resolve_env_config({"taskset": taskset, "agent": {"max_turns": 0}})  # stops before any reply
        env = vf.load_environment(config)
        client = vf.EvalClientConfig(base_url=stub.base_url, api_key_var="MUSAENV_STUB_KEY")
        ctx = vf.ModelContext(client=client, model="stub-model", sampling=vf.SamplingConfig())

        async def one_episode() -> Any:
            async with env.serving():
                return await env.run_episode(next(iter(env.taskset)), ctx)

        episode = asyncio.run(one_episode())
    (trace,) = episode.traces
    record = trace.info["musaenv"]
    assert record["verdicts"] == [] and stub.requests == [] and trace.stop_condition == "max_turns"
    worst = _expected_return([{"score": -1.0, "eval": {"stage": "format_error", "task_id": "l1_relu"}}], max_turns=3)
    assert worst == pytest.approx(-1.0)
    assert trace.rewards["kernelgen_return"].score == pytest.approx(worst) == trace.reward
    assert trace.metrics["submissions"] == 0.0


def test_an_agent_stopped_after_one_failed_reply_gets_that_turns_return(monkeypatch: pytest.MonkeyPatch) -> None:
    # The agent's own turn limit, not the env, ends the episode after turn 1: the return is the shaper's return of
    # that one format_error turn (-1 under PrimeEcho), below the repaired episode of the first test.
    monkeypatch.setenv("PATH", _path_with_uv())
    monkeypatch.setenv("MUSAENV_STUB_KEY", "sk-local-stub")
    with ChatStub(lambda messages: PROSE) as stub:
        taskset = {"id": TASKSET_ID, "tasks": ["l1_relu"], "eval_config": FAST}
        config = vf.resolve_env_config({"taskset": taskset, "agent": {"max_turns": 1}})
        env = vf.load_environment(config)
        client = vf.EvalClientConfig(base_url=stub.base_url, api_key_var="MUSAENV_STUB_KEY")
        ctx = vf.ModelContext(client=client, model="stub-model", sampling=vf.SamplingConfig())

        async def one_episode() -> Any:
            async with env.serving():
                return await env.run_episode(next(iter(env.taskset)), ctx)

        episode = asyncio.run(one_episode())
    (trace,) = episode.traces
    record = trace.info["musaenv"]
    assert record["verdicts"] == ["format_error"] and not record["done"]
    cut = _expected_return([{"score": -1.0, "eval": {"stage": "format_error", "task_id": "l1_relu"}}], max_turns=3)
    assert trace.rewards["kernelgen_return"].score == pytest.approx(cut) == record["episode_return"] == -1.0
    repaired = [{"score": -1.0, "eval": {"stage": "format_error", "task_id": "l1_relu"}},
                {"score": 1.0, "eval": {"stage": "correct", "task_id": "l1_relu"}}]  # fmt: skip
    assert record["episode_return"] < _expected_return(repaired, max_turns=3)
