"""RecordEpisodes / read_episodes: what a user recording KernelGen episodes relies on.

The env is the real ``KernelGenEnv``; only the evaluator is an injected double (verdicts scripted by response
text), so no compiler runs here. The shipped files under ``tests/data/trajectories`` were recorded with the real
evaluator (``benchmarks/record_trajectories.py``) and are checked for the cases they promise to cover.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from musaenv.env import KernelGenEnv
from musaenv.errors import MusaEnvError
from musaenv.recording import EpisodeRecord, RecordEpisodes, iter_episodes, read_episodes
from musaenv.rewards import make_shaper
from musaenv.tasks.task import Task
from musaenv.types import EvalResult, Stage

DATA = Path(__file__).resolve().parents[1] / "data" / "trajectories"


class ScriptedEvaluator:
    """Verdict by response text: "ok" -> correct at 2x, "slow" -> correct at 0.5x, "infra" -> infra_error."""

    tier = "cpu"

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        if response == "ok":
            return EvalResult(stage=Stage.CORRECT, task_id=task.id, trials_passed=5, trials_total=5, speedup=2.0)
        if response == "slow":
            return EvalResult(stage=Stage.CORRECT, task_id=task.id, trials_passed=5, trials_total=5, speedup=0.5)
        if response == "infra":
            return EvalResult(stage=Stage.INFRA_ERROR, task_id=task.id, messages=("worker did not start",))
        return EvalResult(stage=Stage.COMPILE_ERROR, task_id=task.id, compiler_log="error: expected ';'")

    def close(self) -> None:
        pass


def _env(path: Path, reward: str = "primeecho", **kw: object) -> RecordEpisodes:
    return RecordEpisodes(
        KernelGenEnv(task="l1_relu", backend="cpu", reward=reward, evaluator=ScriptedEvaluator()), path, **kw
    )  # type: ignore[arg-type]


def _play(env: RecordEpisodes, responses: list[str], seed: int | None = None, **options: object) -> None:
    env.reset(seed=seed, options=dict(options) or None)
    for r in responses:
        *_, terminated, truncated, _ = env.step(r)
        if terminated or truncated:
            return


def test_finished_episode_round_trips_with_turns_rewards_and_shaper(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "ep.jsonl"
    env = _env(path)
    _play(env, ["bad", "ok"], seed=7)
    (ep,) = read_episodes(path)
    assert isinstance(ep, EpisodeRecord)
    assert (ep.task_id, ep.seed, ep.shaper, ep.terminated, ep.truncated) == ("l1_relu", 7, "primeecho", True, False)
    assert [t.stage for t in ep.turns] == [Stage.COMPILE_ERROR, Stage.CORRECT]
    assert [t.response for t in ep.turns] == ["bad", "ok"]
    assert ep.scores == [-1.0, 1.5]  # s = 1 + 0.5 * min(2 - 1, 2)
    expected = make_shaper("primeecho").episode_rewards([-1.0, 1.5])
    assert [t.turn_reward for t in ep.turns] == pytest.approx(expected)
    assert ep.episode_return == pytest.approx(sum(expected))
    assert sum(t.reward for t in ep.turns) == pytest.approx(ep.episode_return)  # what the env paid per step
    assert [t.loss_weight for t in ep.turns] == [1.0, 0.0]
    assert ep.shaper_params["alpha"] == 0.75
    assert ep.first_success_turn == 2
    assert ep.results[1].speedup == 2.0


def test_one_line_per_finished_episode_and_abandoned_episodes_are_not_written(tmp_path: Path) -> None:
    path = tmp_path / "ep.jsonl"
    env = _env(path, reward="per_turn")
    _play(env, ["ok"], seed=0)
    env.reset(seed=1)
    env.step("bad")  # abandoned: reset before the episode ended
    _play(env, ["bad", "bad", "bad"], seed=2)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    eps = read_episodes(path)
    assert [e.seed for e in eps] == [0, 2]
    assert [e.episode for e in eps] == [0, 1]
    assert eps[1].truncated and not eps[1].terminated
    assert eps[1].first_success_turn is None


def test_infra_turn_is_recorded_with_no_score(tmp_path: Path) -> None:
    path = tmp_path / "ep.jsonl"
    _play(_env(path), ["infra", "ok"], seed=3)
    (ep,) = read_episodes(path)
    assert ep.scores == [None, 1.5]
    assert ep.turns[0].stage is Stage.INFRA_ERROR
    assert ep.turns[0].loss_weight == 0.0  # masked: the first unmasked turn is trained instead
    assert ep.turns[1].loss_weight == 1.0


def test_group_labels_from_constructor_and_reset_options(tmp_path: Path) -> None:
    path = tmp_path / "ep.jsonl"
    env = _env(path, group="g0")
    _play(env, ["ok"], seed=0)
    _play(env, ["ok"], seed=1, group="g1")
    _play(env, ["ok"], seed=2)
    assert [e.group_key for e in read_episodes(path)] == ["g0", "g1", "g0"]
    env2 = _env(tmp_path / "nogroup.jsonl")
    _play(env2, ["ok"], seed=0)
    assert read_episodes(tmp_path / "nogroup.jsonl")[0].group_key == "l1_relu"


def test_truncated_last_line_is_skipped_but_a_corrupt_middle_line_raises(tmp_path: Path) -> None:
    path = tmp_path / "ep.jsonl"
    env = _env(path)
    for seed in range(3):
        _play(env, ["ok"], seed=seed)
    text = path.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) - 40])  # a writer killed mid-line
    assert [e.seed for e in read_episodes(cut)] == [0, 1]
    lines = text.splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], lines[1][:30], lines[2]]) + "\n")
    with pytest.raises(MusaEnvError, match=r"bad\.jsonl:2"):
        read_episodes(bad)


def test_iter_episodes_chains_files_and_names_a_missing_one(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _play(_env(a), ["ok"], seed=0)
    _play(_env(b), ["bad", "ok"], seed=1)
    assert [e.seed for e in iter_episodes([a, b])] == [0, 1]
    with pytest.raises(MusaEnvError, match=r"missing\.jsonl"):
        list(iter_episodes([a, tmp_path / "missing.jsonl"]))


def test_lines_from_a_newer_format_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ep.jsonl"
    _play(_env(path), ["ok"], seed=0)
    d = json.loads(path.read_text())
    d["version"] = 99
    path.write_text(json.dumps(d) + "\n" + json.dumps(d) + "\n")
    with pytest.raises(MusaEnvError, match="version 99"):
        read_episodes(path)


def test_shipped_trajectories_cover_the_promised_cases() -> None:
    early = read_episodes(DATA / "early_and_repair.jsonl")
    assert any(e.first_success_turn == 1 for e in early)
    assert any(e.first_success_turn == 2 for e in early)
    failed = read_episodes(DATA / "all_failed.jsonl")
    assert failed and all(e.first_success_turn is None for e in failed)
    assert len({e.group_key for e in failed}) == 2
    infra = read_episodes(DATA / "flaky_reference_infra.jsonl")
    assert any(t.stage is Stage.INFRA_ERROR and t.score is None for e in infra for t in e.turns)
    for e in early + failed + infra:  # recorded by the real evaluator: real verdict records
        assert all(t.eval["backend"] == "cpu" for t in e.turns)
        assert e.shaper == "primeecho"
