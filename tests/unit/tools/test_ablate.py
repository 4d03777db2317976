"""Offline reward ablation (``musaenv ablate``): re-scoring recorded episodes under several shapers.

Small files with known answers are recorded through the real ``KernelGenEnv`` with an injected scripted evaluator;
the shipped files in ``tests/data/trajectories`` were recorded with the real evaluator.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from musaenv.env import KernelGenEnv
from musaenv.errors import ConfigError, MusaEnvError
from musaenv.recording import RecordEpisodes, read_episodes
from musaenv.tasks.task import Task
from musaenv.tools.ablate import parse_shaper_spec, run_ablation
from musaenv.types import EvalResult, Stage

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "trajectories"
SHIPPED = [DATA / "early_and_repair.jsonl", DATA / "all_failed.jsonl", DATA / "flaky_reference_infra.jsonl"]


class ScriptedEvaluator:
    """ "ok" -> correct at 2x (s = 1.5), "slow" -> correct at 0.5x (s = 1.0), anything else -> compile error."""

    tier = "cpu"

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        speed = {"ok": 2.0, "slow": 0.5}.get(response)
        if speed is None:
            return EvalResult(stage=Stage.COMPILE_ERROR, task_id=task.id)
        return EvalResult(stage=Stage.CORRECT, task_id=task.id, trials_passed=5, trials_total=5, speedup=speed)

    def close(self) -> None:
        pass


@pytest.fixture
def known(tmp_path: Path) -> Path:
    """Three groups of two: g1 = [ok] vs [bad, ok]; g2 = [slow] vs [bad, ok]; g3 = two episodes failing 3 times."""
    path = tmp_path / "known.jsonl"
    env = RecordEpisodes(KernelGenEnv(task="l1_relu", backend="cpu", evaluator=ScriptedEvaluator()), path)
    plan = {"g1": [["ok"], ["bad", "ok"]], "g2": [["slow"], ["bad", "ok"]], "g3": [["bad"] * 3, ["bad"] * 3]}
    seed = 0
    for group, episodes in plan.items():
        for responses in episodes:
            env.reset(seed=seed, options={"group": group})
            seed += 1
            for r in responses:
                *_, terminated, truncated, _ = env.step(r)
                if terminated or truncated:
                    break
    return path


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _by_name(summary, name):  # type: ignore[no-untyped-def]
    return next(s for s in summary.shapers if s.shaper == name)


def test_known_groups_give_the_expected_statistics(known: Path, tmp_path: Path) -> None:
    s = run_ablation([known], ["primeecho", "best", "last", "per_turn"], tmp_path / "out", plots=False)
    assert (s.episodes, s.groups, s.group_sizes) == (6, 3, [2, 2, 2])
    pe, best, last, per_turn = (_by_name(s, n) for n in ("primeecho", "best", "last", "per_turn"))
    # PrimeEcho: [ok] -> 0.75*1.5 + 0.25*1.5 + 0.2 = 1.7; [bad, ok] -> -0.75 + 0.375 + 0.1 = -0.275; [bad]x3 -> -1.
    assert pe.return_max == pytest.approx(1.7)
    assert pe.return_min == pytest.approx(-1.0)
    # best pays [ok] and [bad, ok] the same: g1 has no signal under best (and g3 under every shaper).
    assert best.zero_advantage_share == pytest.approx(2 / 3)
    assert pe.zero_advantage_share == pytest.approx(1 / 3)
    assert per_turn.zero_advantage_share == pytest.approx(1 / 3)
    # Credit: PrimeEcho and best put everything on turn 1 and train only it; last pays the last turn.
    assert pe.first_turn_credit_share == pytest.approx(1.0)
    assert pe.later_turns_trained_share == 0.0
    assert last.later_turns_trained_share == 1.0
    assert last.multi_turn_first_share == pytest.approx(0.0)
    assert last.first_turn_credit_share == pytest.approx(2.5 / 7.5)  # |1.5| + |1.0| of 1.5+1.0+1.5+1.5+1+1


def test_disagreement_counts_opposite_advantage_signs(known: Path, tmp_path: Path) -> None:
    s = run_ablation([known], ["primeecho", "best", "per_turn"], tmp_path / "out", plots=False)
    # g2: best prefers [bad, ok] (1.5 > 1.0); PrimeEcho prefers [slow] (1.2 > -0.275): both episodes flip sign.
    assert s.disagreement["primeecho|best"] == pytest.approx(2 / 6)
    assert s.disagreement["primeecho|per_turn"] == 0.0  # per_turn: 1.0 vs -1 + 1.5 = 0.5, same order
    # g1: best gives 0 advantages where PrimeEcho does not: a mismatch, not an opposite sign.
    assert s.sign_mismatch["primeecho|best"] == pytest.approx(4 / 6)
    (example, *_) = s.examples["primeecho|best"]
    assert example["group"] == "g2"
    assert example["adv_primeecho"] * example["adv_best"] < 0


def test_writes_markdown_csv_episode_table_and_plots(known: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    s = run_ablation([known], ["primeecho", "tcpo", "primeecho:alpha=0.5"], out)
    names = {Path(p).name for p in s.outputs}
    assert {"summary.md", "summary.csv", "disagreement.csv", "episodes.csv"} <= names
    md = (out / "summary.md").read_text()
    for label in ("primeecho", "tcpo", "primeecho:alpha=0.5"):
        assert f"| {label} |" in md
    rows = _csv(out / "summary.csv")
    assert [r["shaper"] for r in rows] == ["primeecho", "tcpo", "primeecho:alpha=0.5"]
    episodes = _csv(out / "episodes.csv")
    assert len(episodes) == 6 and episodes[0]["stages"] == "correct"
    pytest.importorskip("matplotlib")
    for png in ("returns.png", "credit.png", "disagreement.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parameterised_shaper_specs() -> None:
    assert parse_shaper_spec("primeecho:alpha=0.5:bonus_turn1=0.3") == ("primeecho", {"alpha": 0.5, "bonus_turn1": 0.3})
    assert parse_shaper_spec("best") == ("best", {})
    with pytest.raises(ConfigError):
        parse_shaper_spec("primeecho:alpha")


def test_bad_inputs_raise_usage_errors(known: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown reward shaper"):
        run_ablation([known], ["nope"], tmp_path / "o")
    with pytest.raises(ConfigError):
        run_ablation([known], [], tmp_path / "o")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(MusaEnvError, match="no finished episodes"):
        run_ablation([empty], ["best"], tmp_path / "o")


def test_shipped_trajectories_rescore_to_the_recorded_returns(tmp_path: Path) -> None:
    """Offline re-scoring under the recording shaper reproduces what the env paid (no recompiling)."""
    s = run_ablation(SHIPPED, ["primeecho", "best", "last", "per_turn", "tcpo"], tmp_path / "out", plots=False)
    records = [e for f in SHIPPED for e in read_episodes(f)]
    rows = _csv(tmp_path / "out" / "episodes.csv")
    assert len(rows) == len(records) == s.episodes
    for rec, row in zip(records, rows, strict=True):
        assert float(row["return:primeecho"]) == pytest.approx(rec.episode_return, abs=1e-6)
    # l1_softmax/b fails with s = -1 on every turn: no shaper finds a signal there.
    assert all(st.zero_advantage_share is not None and st.zero_advantage_share > 0 for st in s.shapers)
    masked = [r for r in rows if "masked" in r["scores"]]
    assert masked, "the flaky-reference file holds an infra_error turn"


def test_cli_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from musaenv.cli import main

    code = main(
        [
            "ablate",
            "--trajectories",
            *map(str, SHIPPED),
            "--shapers",
            "primeecho,best",
            "--out",
            str(tmp_path / "cli"),
            "--no-plots",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "primeecho" in printed and "best" in printed
    assert (tmp_path / "cli" / "summary.md").exists()
    assert main(["ablate", "--trajectories", str(SHIPPED[0]), "--shapers", "nope", "--out", str(tmp_path)]) == 2


def test_cli_as_a_module(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "musaenv.cli",
            "ablate",
            "--trajectories",
            str(SHIPPED[1]),
            "--shapers",
            "primeecho,last",
            "--out",
            str(tmp_path / "m"),
            "--no-plots",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "last" in proc.stdout
    assert (tmp_path / "m" / "summary.csv").exists()
