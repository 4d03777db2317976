"""The TRL environment_factory adapter, exercised as TRL drives it (without TRL): construct with no arguments,
``reset(**row)``, call the public tool methods, read the reward. Only refused responses are submitted (no build)."""

from __future__ import annotations

import inspect

import pytest

from musaenv.evaluator.local import LocalEvaluator
from musaenv.rl.adapters.pool import program_response
from musaenv.rl.adapters.trl import (
    KernelGenToolEnv,
    close_trl_environment,
    make_trl_environment,
    trl_dataset_rows,
    trl_reward_func,
)
from musaenv.tasks.builtin import solution_source
from musaenv.types import EvalResult, Stage


@pytest.fixture
def env_cls():
    cls = make_trl_environment(backend="cpu", max_turns=2)
    yield cls
    close_trl_environment(cls)


def public_methods(obj: object) -> set[str]:
    return {n for n, m in inspect.getmembers(obj, inspect.ismethod) if not n.startswith("_")}


def test_class_matches_the_environment_factory_contract(env_cls) -> None:
    env = env_cls()  # TRL constructs it with no arguments
    assert issubclass(env_cls, KernelGenToolEnv)
    assert public_methods(env) == {"reset", "submit_kernel", "get_reward"}
    sig = inspect.signature(env.submit_kernel)
    assert list(sig.parameters) == ["code"]
    assert sig.parameters["code"].annotation in (str, "str") and sig.return_annotation in (str, "str")
    assert "Args:" in (env.submit_kernel.__doc__ or "") and "code:" in (env.submit_kernel.__doc__ or "")
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(env.reset).parameters.values())


def test_tool_schemas_build_with_transformers(env_cls) -> None:
    utils = pytest.importorskip("transformers.utils")
    schema = utils.get_json_schema(env_cls().submit_kernel)
    fn = schema["function"]
    assert fn["name"] == "submit_kernel"
    assert fn["parameters"]["properties"]["code"]["type"] == "string"
    assert fn["parameters"]["required"] == ["code"]
    assert utils.get_json_schema(env_cls().get_reward)["function"]["name"] == "get_reward"


def test_reset_returns_the_task_prompt_from_the_dataset_row(env_cls) -> None:
    rows = trl_dataset_rows(["l1_relu", "l1_add"], repeats=2)
    assert [r["task"] for r in rows] == ["l1_relu", "l1_add", "l1_relu", "l1_add"]
    assert rows[0]["prompt"][0]["role"] == "user" and "submit_kernel" in rows[0]["prompt"][0]["content"]
    env = env_cls()
    prompt = env.reset(**rows[1], seed=3)
    assert env.task_id == "l1_add" and "class Model" in prompt and "ModelNew" in prompt
    assert env.get_reward() == pytest.approx(-1.0) and not env.done  # silence scores like the worst verdict


def test_submissions_return_feedback_and_the_reward_is_the_shaped_return(env_cls) -> None:
    env = env_cls()
    env.reset(task="l1_relu", seed=0)
    first = env.submit_kernel(program_response("l1_relu", "prose"))
    assert "format_error" in first and "1 submission(s) left" in first and not env.done
    second = env.submit_kernel(program_response("l1_relu", "cheat"))
    assert "cheating" in second and "episode is over" in second and env.done
    # PrimeEcho on scores (-1, -1): 0.75 * -1 + 0.25 * -1 + no early bonus.
    assert env.get_reward() == pytest.approx(-1.0)
    assert env.get_reward() == pytest.approx(env.last_info["episode_return"])
    assert trl_reward_func([env, env]) == [env.get_reward()] * 2
    with pytest.raises(ValueError, match="episode is over"):
        env.submit_kernel("anything")
    env.reset(task="l1_relu")
    assert env.get_reward() == pytest.approx(-1.0) and not env.done


def test_instances_of_one_class_share_one_evaluator(env_cls) -> None:
    a, b = env_cls(), env_cls()
    a.reset(task="l1_relu")
    b.reset(task="l1_relu")
    assert a._env is not None and b._env is not None
    assert a._env.evaluator is b._env.evaluator is env_cls.shared_evaluator
    other = make_trl_environment(backend="cpu")
    assert other.shared_evaluator is None  # a new class does not inherit another's evaluator


class RefusingEvaluator:
    """Evaluator double: every response is a format error; remembers whether it was closed."""

    tier = "cpu"

    def __init__(self) -> None:
        self.closed = False

    def evaluate(self, task, response, seed=0):
        return EvalResult(Stage.FORMAT_ERROR, task_id=task.id, messages=("no code",))

    def close(self) -> None:
        self.closed = True


def test_a_given_evaluator_is_used_and_left_open() -> None:
    ev = RefusingEvaluator()
    cls = make_trl_environment(task="l1_relu", backend="cpu", max_turns=1, evaluator=ev)
    env = cls()
    env.reset()
    assert env.task_id == "l1_relu" and env._env is not None and env._env.evaluator is ev
    env.submit_kernel("no code at all")
    assert env.done and env.get_reward() == pytest.approx(-1.0)
    close_trl_environment(cls, [env])
    assert env._env is None and cls.shared_evaluator is ev and not ev.closed


def test_an_evaluator_the_class_created_is_closed(env_cls) -> None:
    env = env_cls()
    env.reset(task="l1_relu")
    created = env_cls.shared_evaluator
    assert isinstance(created, LocalEvaluator)
    close_trl_environment(env_cls, [env])
    assert env_cls.shared_evaluator is None and created._closed


@pytest.mark.slow
def test_a_correct_kernel_ends_the_episode_with_a_positive_reward(env_cls) -> None:
    env = env_cls()
    env.reset(task="l1_relu", seed=0)
    feedback = env.submit_kernel(solution_source("l1_relu"))
    assert "Verdict: correct" in feedback and "episode is over" in feedback and env.done
    assert env.get_reward() > 1.0  # PrimeEcho: s_1 >= 1 plus the first-turn bonus


def test_musaenv_dataset_trl_rows_give_one_task_prompt_that_asks_for_the_tool(env_cls, tmp_path) -> None:
    """``musaenv dataset --trainer trl``: TRL appends reset()'s answer to the row's last user message (with nothing
    between), so the row holds only the instruction; the task prompt, read once, asks for a ``submit_kernel`` call
    with ``code``, which is the schema transformers builds for the tool (not a fenced block)."""
    import json

    from musaenv.cli import main
    from musaenv.rl.adapters.trl import TOOL_NAME
    from musaenv.rl.dataset import dataset_rows

    out = tmp_path / "trl.jsonl"
    assert main(["dataset", "--trainer", "trl", "--tasks", "l1_relu", "-o", str(out)]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row == dataset_rows(["l1_relu"], trainer="trl")[0] and row["task"] == "l1_relu"
    (message,) = row["prompt"]
    assert "Reference program:" not in message["content"] and f"`{TOOL_NAME}`" in message["content"]
    env = env_cls()
    seen = message["content"] + env.reset(**row)  # what TRL 1.16's GRPOTrainer puts in the last user message
    assert seen.count("Reference program:") == 1 and seen.count("Task l1_relu (level 1)") == 1
    assert "`correct`.\n\nTask l1_relu" in seen  # the two paragraphs stay apart
    assert "fenced" not in seen and f"Call the tool `{TOOL_NAME}`" in seen and "`code` argument" in seen
    utils = pytest.importorskip("transformers.utils")
    fn = utils.get_json_schema(env.submit_kernel)["function"]
    assert fn["name"] == TOOL_NAME and fn["parameters"]["required"] == ["code"]


def test_a_chat_row_holding_the_task_prompt_is_refused(env_cls) -> None:
    from musaenv.errors import ConfigError
    from musaenv.rl.dataset import dataset_rows

    with pytest.raises(ConfigError, match="dataset --trainer trl"):
        env_cls().reset(**dataset_rows(["l1_relu"])[0])
