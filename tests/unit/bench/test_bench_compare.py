"""``musaenv bench compare``: paired tests that timing noise cannot fake, and that find a real difference.

Runs are ``results.jsonl`` rows as the runner writes them, with speedups drawn from a seeded noise model (heavy
load: a sample's speedup reads anywhere from about 0.3x to 3x its true value, and a whole run can be shifted);
nothing is compiled.
"""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path

import pytest

from musaenv.bench.compare import compare_rows
from musaenv.bench.report import compare_runs
from musaenv.bench.stats import holm, paired_t, sign_test, t_quantile, t_two_sided_p
from musaenv.bench.store import ResultStore

TASKS = [f"l1_task{i}" for i in range(8)]


def _row(task: str, sample: int, speedup: float | None, stage: str = "correct", response: str = "") -> dict:
    sha = hashlib.sha256((response or f"{task}/{sample}").encode()).hexdigest()
    result = {"stage": stage, "speedup": speedup if stage == "correct" else None}
    return {"task": task, "sample": sample, "level": 1, "response_sha256": sha, "result": result}


def _run(rng: random.Random, true: dict[tuple[str, int], float], sigma: float, shift: float = 1.0,
         suffix: str = "") -> list[dict]:  # fmt: skip
    """One run's rows: each sample's true speedup times the run's shift times log-normal noise."""
    rows = []
    for (task, sample), v in true.items():
        rows.append(
            _row(task, sample, v * shift * math.exp(rng.gauss(0.0, sigma)), response=f"{task}/{sample}{suffix}")
        )
    return rows


def _truth(rng: random.Random, samples: int = 5) -> dict[tuple[str, int], float]:
    return {(t, s): math.exp(rng.uniform(-1.5, 1.5)) for t in TASKS for s in range(samples)}


def test_statistics_match_reference_values() -> None:
    # Reference values of Student's t and the binomial distribution (as scipy.stats gives them).
    assert t_two_sided_p(2.0, 4) == pytest.approx(0.116117, abs=1e-6)
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5, abs=1e-12)
    assert t_quantile(0.975, 9) == pytest.approx(2.262157, abs=1e-6)
    assert t_quantile(0.975, 1) == pytest.approx(12.706205, abs=1e-5)
    assert sign_test(0, 5) == pytest.approx(0.0625) and sign_test(3, 9) == pytest.approx(0.145996, abs=1e-6)
    assert sign_test(0, 0) == 1.0
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06])
    t = paired_t([0.1, 0.3, 0.2, 0.4])
    assert t is not None and t.mean == pytest.approx(0.25) and t.low < 0.25 < t.high and t.p_value < 0.05
    assert paired_t([0.5]) is None and paired_t([0.0, 0.0]).p_value == 1.0  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", range(20))
def test_identical_generations_with_timing_noise_are_never_declared_different(seed: int) -> None:
    rng = random.Random(seed)
    true = _truth(rng)
    # Heavy per-sample noise, and run B timed on a quieter machine: every speedup reads 1.6x higher.
    a, b = _run(rng, true, sigma=0.6), _run(rng, true, sigma=0.6, shift=1.6)
    b[3]["result"] = {"stage": "timeout", "speedup": None}  # a flaky verdict under load
    c = compare_rows(a, b)
    assert c.differing_tasks() == []
    assert c.overall.verdict().startswith("no difference: the same responses in both runs")
    assert all(t.identical == t.pairs for t in c.tasks)


def test_equivalent_generations_are_rarely_declared_different() -> None:
    # Different response texts (no identity shortcut), equal true speed, per-sample noise: the tests hold their
    # level. Over 200 pairs of runs, a false "different" (any task, or overall) stays near alpha = 5 %.
    false = 0
    for seed in range(200):
        rng = random.Random(1000 + seed)
        true = _truth(rng)
        c = compare_rows(_run(rng, true, 0.5), _run(rng, true, 0.5, suffix="-b"))
        assert c.overall.identical == 0
        false += bool(c.differing_tasks()) or not c.overall.verdict().startswith("no ")
    assert false <= 20, false


def test_a_genuinely_faster_run_is_found_with_its_size() -> None:
    rng = random.Random(7)
    true = _truth(rng, samples=10)
    a = _run(rng, true, sigma=0.2)
    b = _run(rng, true, sigma=0.2, shift=2.0, suffix="-faster")  # B's kernels are twice as fast
    c = compare_rows(a, b)
    verdict = c.overall.verdict()
    assert verdict.startswith("B faster") and c.overall.speed is not None
    assert math.exp(c.overall.speed.low) < 2.0 < math.exp(c.overall.speed.high)
    assert math.exp(c.overall.speed.mean) == pytest.approx(2.0, rel=0.1)
    assert sorted(c.differing_tasks()) == TASKS
    assert all(t.verdict().startswith("B faster") for t in c.tasks)


def test_more_correct_run_is_found_and_a_small_speed_change_is_not_a_difference() -> None:
    rng = random.Random(3)
    true = _truth(rng, samples=12)
    a = _run(rng, true, sigma=0.01)
    b = _run(rng, true, sigma=0.01, shift=1.02, suffix="-b")  # 2 % faster: below the 5 % margin
    for row in a:
        if row["task"] == "l1_task0":
            row["result"] = {"stage": "incorrect", "speedup": None}
    c = compare_rows(a, b)
    first = next(t for t in c.tasks if t.task == "l1_task0")
    assert first.verdict().startswith("B more often correct (+100 points")
    assert c.differing_tasks() == ["l1_task0"]
    assert next(t for t in c.tasks if t.task == "l1_task1").verdict() == "no significant difference"


def test_compare_runs_prints_the_paired_table(tmp_path: Path) -> None:
    rng = random.Random(0)
    true = _truth(rng)
    for name, shift in (("a", 1.0), ("b", 3.0)):
        store = ResultStore(tmp_path / name)
        store.open({"config": {"timing": {"baseline": "eager"}}}, resume=False)
        for row in _run(rng, true, 0.6, shift=shift):
            store.append(row)
    text = compare_runs(tmp_path / "a", tmp_path / "b")
    assert "## Paired comparison" in text and "**Overall**: no difference: the same responses in both runs" in text
    assert "| l1_task0 | 5 (5) | 5 | 5 |" in text
    assert "Tasks with a significant difference: none." in text


def test_compare_command_takes_the_level_and_margin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from musaenv.cli import main

    rng = random.Random(5)
    true = _truth(rng, samples=10)
    for name, shift, suffix in (("a", 1.0, ""), ("b", 1.3, "-b")):
        store = ResultStore(tmp_path / name)
        store.open({"config": {"timing": {"baseline": "eager"}}}, resume=False)
        for row in _run(rng, true, 0.05, shift=shift, suffix=suffix):
            store.append(row)
    assert main(["bench", "compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "**Overall**: B faster 1.3" in capsys.readouterr().out
    assert main(["bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--margin", "0.5"]) == 0
    assert "**Overall**: no significant difference." in capsys.readouterr().out  # 30 % is below a 50 % margin
    assert main(["bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--alpha", "2"]) == 2
