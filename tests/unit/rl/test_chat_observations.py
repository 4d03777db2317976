"""Chat-native observations (info["feedback"], observation="message") and the task-prompt dataset export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from musaenv.cli import main
from musaenv.env import KernelGenEnv
from musaenv.errors import ConfigError
from musaenv.rl.dataset import dataset_rows, write_dataset
from musaenv.tasks.prompts import EPISODE_OVER, RETRY_LINE


@pytest.mark.parametrize("mode", ["transcript", "message"])
def test_feedback_is_the_new_user_message_and_message_mode_observes_it_alone(mode: str) -> None:
    env = KernelGenEnv(task="l1_relu", backend="cpu", max_turns=2, observation=mode)
    try:
        first, _ = env.reset(seed=0)
        obs, _, terminated, truncated, info = env.step("no code in this answer")  # format_error: no compiler run
        assert not (terminated or truncated)
        fb = info["feedback"]
        assert fb.startswith("Verdict: format_error") and fb.endswith(RETRY_LINE)
        if mode == "message":
            assert obs == fb
        else:
            assert obs.startswith(first) and fb.split("\n")[0] in obs and len(obs) > len(first) + len(fb)
        obs, _, _, truncated, info = env.step("still no code")
        assert truncated and info["feedback"].startswith(EPISODE_OVER) and RETRY_LINE not in info["feedback"]
        assert (obs == info["feedback"]) is (mode == "message")
    finally:
        env.close()


def test_an_unknown_observation_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match="observation"):
        KernelGenEnv(task="l1_relu", backend="cpu", observation="everything")


def test_rows_carry_the_reset_prompt_as_chat_messages() -> None:
    rows = dataset_rows(["l1_relu"], backend="cpu", repeats=2, system="be fast")
    assert len(rows) == 2 and rows[0] == rows[1] and rows[0] is not rows[1]
    row = rows[0]
    assert {k: row[k] for k in ("task", "level", "env", "env_class", "backend")} == {
        "task": "l1_relu", "level": 1, "env": "KernelGen-v0", "env_class": "musaenv", "backend": "cpu"}  # fmt: skip
    env = KernelGenEnv(task="l1_relu", backend="cpu")
    try:
        prompt, _ = env.reset(seed=0)
    finally:
        env.close()
    assert row["prompt"] == [{"role": "system", "content": "be fast"}, {"role": "user", "content": prompt}]
    assert {r["level"] for r in dataset_rows(level=2)} == {2}


def test_cli_exports_jsonl_and_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tasks.jsonl"
    assert main(["dataset", "--format", "jsonl", "-o", str(out), "--level", "1"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == dataset_rows(level=1) and "wrote" in capsys.readouterr().out
    pq = pytest.importorskip("pyarrow.parquet")
    path = write_dataset(rows, tmp_path / "tasks.parquet", "parquet")
    assert pq.read_table(path).to_pylist() == rows
