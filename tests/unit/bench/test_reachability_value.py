"""benchmarks/reachability_value.py's pure half: how candidates are classified, which recorded programs are read,
which evaluations a cap keeps, and the summary. No build or evaluation runs here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.reachability_value import (
    Outcome,
    every_kth,
    later_verdict,
    static_kind,
    summarize,
    trajectory_programs,
)


@pytest.mark.parametrize(
    ("on", "off", "kind"),
    [
        ([], [], "accepted"),
        (["forbidden_torch_op"], [], "analysis_only"),
        (["file_access", "forbidden_torch_op"], ["file_access"], "also_refused"),
        (["network"], ["network"], "also_refused"),
    ],
)
def test_static_kind(on: list[str], off: list[str], kind: str) -> None:
    assert static_kind(on, off) == kind


@pytest.mark.parametrize(
    ("stage", "flags", "verdict"),
    [
        (None, [], "not_run"),
        ("correct", [], "passed"),
        ("cheating", ["forbidden_aten_op"], "cheating"),
        ("incorrect", [], "failed"),
        ("runtime_error", [], "failed"),
        ("cheating", [], "failed"),  # a cheating verdict without a flag names no layer
    ],
)
def test_later_verdict(stage: str | None, flags: list[str], verdict: str) -> None:
    assert later_verdict(stage, flags) == verdict


def test_every_kth_caps_and_spreads() -> None:
    items = list(range(10))
    assert every_kth(items, None) == items
    assert every_kth(items, 20) == items
    assert every_kth(items, 4) == [0, 3, 6, 9]  # k = ceil(10 / 4) = 3
    assert every_kth(items, 5) == [0, 2, 4, 6, 8]


def _response(code: str) -> str:
    return f"Here it is:\n\n```python\n{code}```\n"


def test_trajectory_programs_reads_distinct_code(tmp_path: Path) -> None:
    a = "import torch\n\nclass ModelNew:\n    pass\n"
    b = "import torch\n\nclass ModelNew:\n    x = 1\n"
    ep1 = {"task_id": "l1_relu", "turns": [{"turn": 1, "response": _response(a)}, {"turn": 2, "response": "prose"}]}
    ep2 = {
        "task_id": "l1_softmax",
        "turns": [{"turn": 1, "response": _response(a)}, {"turn": 2, "response": _response(b)}],
    }
    (tmp_path / "run.jsonl").write_text(json.dumps(ep1) + "\n\n" + json.dumps(ep2) + "\n")
    (tmp_path / "notes.txt").write_text(json.dumps(ep1))  # not a .jsonl: not read
    got = trajectory_programs(tmp_path)
    assert [(name, task) for name, task, _ in got] == [("run:1:t1", "l1_relu"), ("run:3:t2", "l1_softmax")]
    assert [code for _, _, code in got] == [a, b]


def _o(corpus: str, on: list[str], off: list[str], ms_on: float = 10.0, **later: Any) -> Outcome:
    return Outcome(corpus, "c", "strict", on, off, ms_on=ms_on, ms_off=8.0, **later)


def test_summarize_counts_unique_refusals_and_saved_seconds() -> None:
    outcomes = [
        _o("solutions", [], []),
        _o("adversarial", ["network"], ["network"]),
        _o("adversarial", ["file_access", "output_cache"], ["file_access"]),
        _o("adversarial", ["forbidden_torch_op"], [], stage="cheating", flags_later=["forbidden_aten_op"], eval_s=4.0,
           compile_s=3.0),
        _o("adversarial", ["forbidden_torch_op", "no_custom_kernel"], [], stage="correct", eval_s=2.0, compile_s=1.0),
        _o("trajectories", ["reference_model"], [], ms_on=12.0),
    ]  # fmt: skip
    s = summarize(outcomes)
    assert s["per_corpus"] == {
        "solutions": {"accepted": 1},
        "adversarial": {"also_refused": 2, "analysis_only": 2},
        "trajectories": {"analysis_only": 1},
    }
    assert s["flagged"] == 4 and s["analysis_only"] == 3
    assert s["later"] == {"cheating": 1, "passed": 1, "not_run": 1}
    assert s["later_flags"] == {"forbidden_aten_op": 1}
    assert s["by_flag"] == {
        "forbidden_torch_op": {"cheating": 1, "sole_flag": 1, "passed": 1},
        "no_custom_kernel": {"passed": 1},
        "reference_model": {"not_run": 1, "sole_flag": 1},
    }
    assert s["saved_s_total"] == 6.0 and s["saved_s_median"] == 3.0 and s["compile_s_median"] == 2.0
    assert s["analysis_ms_median"] == 2.0 and s["analysis_ms_max"] == 4.0


def test_summarize_empty() -> None:
    s = summarize([])
    assert s["analysis_only"] == 0 and s["saved_s_median"] is None and s["analysis_ms_median"] is None
