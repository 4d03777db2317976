"""DiscreteKernelEnv, the candidate pool and the evaluation cache.

Most tests inject a verdict-table evaluator (a test double of the evaluator, not of the adapter) so the wrapper's
own logic runs without compiling; the built-in pool's static verdicts come from the real evaluator (no build).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

from musaenv.evaluator.local import LocalEvaluator
from musaenv.rl.adapters.eval_cache import CachingEvaluator
from musaenv.rl.adapters.pool import PROGRAMS, CandidatePool, program_response
from musaenv.rl.adapters.sb3 import STAGES, DiscreteKernelEnv
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.types import EvalResult, Stage

NAMES = ("fast", "slow", "partial", "broken")
VERDICTS = {
    "fast": EvalResult(Stage.CORRECT, trials_passed=5, trials_total=5, speedup=3.0),
    "slow": EvalResult(Stage.CORRECT, trials_passed=5, trials_total=5, speedup=0.5),
    "partial": EvalResult(Stage.INCORRECT, trials_passed=3, trials_total=5),
    "broken": EvalResult(Stage.COMPILE_ERROR, compiler_log="error: expected ';'"),
    "flaky": EvalResult(Stage.INFRA_ERROR, messages=("worker did not start",)),
}


class VerdictTable:
    """Evaluator double: the response text names its verdict; records every call."""

    tier = "cpu"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def evaluate(self, task, response, seed=0):
        self.calls.append((task.id, response, seed))
        return VERDICTS[response.split()[0]].replace(task_id=task.id, backend="cpu")

    def close(self) -> None:
        pass


def table_pool(task_ids=("l1_relu", "l1_add")) -> CandidatePool:
    return CandidatePool(NAMES, {t: tuple(f"{n} program for {t}" for n in NAMES) for t in task_ids})


def make_env(**kw) -> tuple[DiscreteKernelEnv, VerdictTable]:
    table = VerdictTable()
    kw.setdefault("pool", table_pool())
    return DiscreteKernelEnv(evaluator=table, backend="cpu", **kw), table


def test_spaces_and_checkers() -> None:
    env, _ = make_env()
    assert env.action_space.n == len(NAMES)
    assert env.observation_space.shape == (2 + len(STAGES) + 3,)
    gym_check_env(env, skip_render_check=True)
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    sb3_checker.check_env(env, warn=True)


def test_observation_encodes_task_verdict_turn_and_score() -> None:
    env, _ = make_env()
    obs, info = env.reset(seed=0, options={"task": "l1_add"})
    n_tasks = 2
    assert info["task_id"] == "l1_add"
    assert obs[:n_tasks].tolist() == [0.0, 1.0]
    assert obs[n_tasks] == 1.0 and obs[n_tasks + 1 : -2].sum() == 0.0  # slot 0: no attempt yet
    assert obs[-2:].tolist() == [0.0, 0.0]
    obs, _, terminated, truncated, info = env.step(NAMES.index("partial"))
    assert not terminated and not truncated and info["program"] == "partial"
    assert obs[n_tasks + 1 + STAGES.index(Stage.INCORRECT)] == 1.0
    assert obs[n_tasks:-2].sum() == 1.0
    assert obs[-2] == pytest.approx(1 / 3)
    assert obs[-1] == pytest.approx(-0.5 + 0.5 * 3 / 5)  # MusaCoder eq. 2 for q = 0.6
    assert env.observation_space.contains(obs)


def test_reward_is_the_env_shaped_reward_and_early_success_pays_more() -> None:
    env, _ = make_env(max_turns=3)
    env.reset(seed=1, options={"task": "l1_relu"})
    _, r1, term, _, _ = env.step(NAMES.index("broken"))
    assert r1 == pytest.approx(-1.0) and not term  # PrimeEcho pays online: R_1 = s_1 for a failed turn 1
    _, r2, term, _, info = env.step(NAMES.index("fast"))
    assert term
    assert r1 + r2 == pytest.approx(info["episode_return"])
    late = r1 + r2
    env.reset(seed=1, options={"task": "l1_relu"})
    _, early, term, _, _ = env.step(NAMES.index("fast"))
    assert term and early > late


def test_episode_truncates_after_max_turns_and_reset_picks_tasks_by_seed() -> None:
    env, _ = make_env(max_turns=2)
    env.reset(seed=3)
    _, _, term, trunc, _ = env.step(NAMES.index("broken"))
    assert not term and not trunc
    _, _, term, trunc, _ = env.step(NAMES.index("partial"))
    assert trunc and not term
    firsts = [env.reset(seed=s)[1]["task_id"] for s in range(12)]
    assert set(firsts) == {"l1_relu", "l1_add"}
    assert firsts == [env.reset(seed=s)[1]["task_id"] for s in range(12)]
    with pytest.raises(Exception, match="not in this env's tasks"):
        env.reset(options={"task": "l1_gelu"})


def test_cache_evaluates_each_program_once_per_seed_bucket() -> None:
    env, table = make_env(eval_seeds=2)
    for episode in range(10):
        env.reset(seed=episode, options={"task": "l1_relu"})
        env.step(NAMES.index("fast"))
    assert len(table.calls) <= 2
    assert {seed for _, _, seed in table.calls} <= {0, 1}
    assert env.cache is not None and env.cache.hits == 10 - len(table.calls)


def test_without_cache_every_step_is_evaluated() -> None:
    env, table = make_env(eval_seeds=None)
    for episode in range(3):
        env.reset(seed=episode, options={"task": "l1_relu"})
        env.step(NAMES.index("fast"))
    assert len(table.calls) == 3 and env.cache is None


def test_cache_file_is_reloaded_and_infra_errors_are_not_kept(tmp_path: Path) -> None:
    task = get_task("l1_relu")
    path = tmp_path / "evals.json"
    first = VerdictTable()
    cache = CachingEvaluator(first, seeds=1, path=path)
    assert cache.evaluate(task, "partial x", seed=7).stage is Stage.INCORRECT
    assert cache.evaluate(task, "flaky x", seed=7).stage is Stage.INFRA_ERROR
    assert cache.evaluate(task, "flaky x", seed=8).stage is Stage.INFRA_ERROR
    assert len(first.calls) == 3 and len(json.loads(path.read_text())) == 1
    second = VerdictTable()
    again = CachingEvaluator(second, seeds=1, path=path)
    result = again.evaluate(task, "partial x", seed=123)
    assert (result.stage, result.trials_passed, result.task_id) == (Stage.INCORRECT, 3, "l1_relu")
    assert second.calls == [] and again.hits == 1
    assert again.key(task, "partial x", 0) != again.key(task, "partial y", 0)
    assert again.key(task, "partial x", 0) != again.key(get_task("l1_add"), "partial x", 0)


def test_builtin_pool_variants_share_the_shipped_solution() -> None:
    pool = CandidatePool.builtin(["l1_relu"])
    assert pool.names == PROGRAMS
    fast, slow, wrong, crash, cheat, prose = pool.responses["l1_relu"]
    assert solution_source("l1_relu").strip() in fast
    cpp = solution_source("l1_relu").split('r"""')[1].split('"""')[0]
    for variant in (slow, wrong, crash, cheat):
        assert cpp in variant  # same C++ source: one build serves every variant
    assert "```" not in prose
    with pytest.raises(Exception, match="expected one of"):
        program_response("l1_relu", "fastest")
    with pytest.raises(Exception, match="one per name"):
        CandidatePool(("a", "b"), {"l1_relu": ("only one",)})


def test_real_evaluator_refuses_cheat_and_prose_without_building() -> None:
    task = get_task("l1_relu")
    with LocalEvaluator("cpu") as ev:
        cheat = ev.evaluate(task, program_response("l1_relu", "cheat"))
        prose = ev.evaluate(task, program_response("l1_relu", "prose"))
    assert cheat.stage is Stage.CHEATING and "forbidden_torch_op" in cheat.flags
    assert cheat.compile_time_s is None
    assert prose.stage is Stage.FORMAT_ERROR


@pytest.fixture
def one_torch_thread():
    """PPO's tiny networks run several times faster on one thread than on two contended ones."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(before)


@pytest.mark.slow
def test_ppo_learns_to_pick_the_fast_program(one_torch_thread) -> None:
    sb3 = pytest.importorskip("stable_baselines3")
    env, _ = make_env(pool=table_pool(("l1_relu",)), max_turns=2)
    model = sb3.PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=4, learning_rate=3e-3, seed=0, device="cpu")
    model.learn(total_timesteps=1024)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert NAMES[int(action)] == "fast"
    with one_torch_thread.no_grad():
        probs = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0]).distribution.probs
    assert float(probs[0, NAMES.index("fast")]) > 0.5


EXPECTED_CPU_VERDICTS = {
    "fast": "correct",
    "slow": "correct",
    "wrong": "incorrect",
    "crash": "runtime_error",
    "cheat": "cheating",
    "prose": "format_error",
}


@pytest.mark.slow
def test_builtin_programs_get_their_documented_verdicts_from_the_real_verifier(tmp_path: Path) -> None:
    path = tmp_path / "evals.json"
    env = DiscreteKernelEnv(tasks=["l1_relu"], backend="cpu", max_turns=1, eval_cache_path=path)
    verdicts = {}
    for action, name in enumerate(env.pool.names):
        env.reset(seed=action)
        _, _, _, _, info = env.step(action)
        verdicts[name] = info["eval"]["stage"]
    env.close()
    assert verdicts == EXPECTED_CPU_VERDICTS
    again = DiscreteKernelEnv(tasks=["l1_relu"], backend="cpu", max_turns=1, eval_cache_path=path)
    for action in range(len(again.pool.names)):
        again.reset(seed=100 + action)
        again.step(action)
    assert again.cache is not None and again.cache.misses == 0 and again.cache.hits == len(PROGRAMS)
    again.close()
