"""Progress of batches: periodic lines (done/total, rate, ETA, verdicts) when not on a terminal, for the pool too."""

from __future__ import annotations

import io
import logging
import time
from typing import Any

import pytest

from musaenv.evaluator.pool import EvalRequest, EvaluatorPool
from musaenv.evaluator.progress import Progress, format_duration
from musaenv.tasks.builtin import get_task
from tests.unit.evaluator.test_pool import SlowDouble


def test_lines_say_done_total_rate_eta_and_verdicts_when_not_on_a_terminal(monkeypatch: Any) -> None:
    monkeypatch.setattr(logging.getLogger("musaenv.progress"), "hasHandlers", lambda: False)  # logging unset
    out = io.StringIO()
    with Progress(4, "bench", interval_s=0.0, stream=out) as p:
        p.update("correct")
        p.update("compile_error", n=2)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # one per update; the final one is not repeated at close
    assert lines[0].startswith("bench: 1/4 (25%), ") and "/min, ETA " in lines[0] and lines[0].endswith("correct=1")
    assert lines[1].startswith("bench: 3/4 (75%)") and "compile_error=2 correct=1" in lines[1]


def test_lines_are_rate_limited_and_go_to_logging_when_it_is_configured(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="musaenv.progress"), Progress(3, interval_s=3600, stream=out) as p:
        for _ in range(3):
            p.update("incorrect")
    assert out.getvalue() == ""
    msgs = [r.getMessage() for r in caplog.records if r.name == "musaenv.progress"]
    assert len(msgs) == 1 and msgs[0].startswith("evaluating: 3/3 (100%)") and "incorrect=3" in msgs[0]


def test_disabled_progress_writes_nothing() -> None:
    out = io.StringIO()
    with Progress(2, enabled=False, interval_s=0.0, stream=out) as p:
        p.update("correct")
    assert out.getvalue() == "" and p.done == 1


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 59.6, 75, 3725)] == ["0s", "1m00s", "1m15s", "1h02m05s"]


def test_pool_batches_report_progress_in_logs(caplog: pytest.LogCaptureFixture) -> None:
    SlowDouble.live, SlowDouble.peak, SlowDouble.calls = 0, 0, []
    relu = get_task("l1_relu")
    reqs = [EvalRequest(relu, "ok"), EvalRequest(relu, "wrong"), EvalRequest(relu, "ok:0.01")]
    pool = EvaluatorPool("cpu", compile_workers=2, evaluator_factory=SlowDouble)
    with caplog.at_level(logging.INFO, logger="musaenv.progress"), pool:
        pool.evaluate_many(reqs, progress=True)
    msgs = [r.getMessage() for r in caplog.records if r.name == "musaenv.progress"]
    assert msgs and msgs[-1].startswith("evaluating: 3/3") and "correct=2 incorrect=1" in msgs[-1]


def test_pool_batch_lines_name_the_requests_in_flight(caplog: pytest.LogCaptureFixture, monkeypatch: Any) -> None:
    """A pool batch's heartbeat names what runs (``<task id>#<index>``), and nothing once the batch is done."""
    monkeypatch.setenv("MUSAENV_PROGRESS_INTERVAL_S", "0.1")
    SlowDouble.live, SlowDouble.peak, SlowDouble.calls = 0, 0, []
    relu = get_task("l1_relu")
    pool = EvaluatorPool("cpu", compile_workers=1, evaluator_factory=SlowDouble)
    with caplog.at_level(logging.INFO, logger="musaenv.progress"), pool:
        pool.evaluate_many([EvalRequest(relu, "ok:0.6"), EvalRequest(relu, "ok:0.01")], progress=True)
    msgs = [r.getMessage() for r in caplog.records if r.name == "musaenv.progress"]
    assert any(m.endswith("running: l1_relu#0") for m in msgs), msgs  # the slow one, while the fast one is done
    assert msgs[-1].startswith("evaluating: 2/2") and "running" not in msgs[-1], msgs


def test_a_heartbeat_names_what_runs_while_nothing_finishes(monkeypatch: Any) -> None:
    """Off a terminal, a slow item (a first build, a cold derivation) still gets a line every interval: done/total,
    rate, ETA and what is running now, although no item finishes."""
    monkeypatch.setattr(logging.getLogger("musaenv.progress"), "hasHandlers", lambda: False)
    out = io.StringIO()  # not a terminal
    with Progress(2, "bench", interval_s=0.1, stream=out) as p:
        with p.working("level1/slow_task"):
            time.sleep(0.65)  # the slow fake task: nothing finishes meanwhile
        p.update("correct")
    lines = out.getvalue().splitlines()
    beats = [ln for ln in lines if ln.startswith("bench: 0/2 (0%)")]
    assert len(beats) >= 3, lines
    assert all("/min, ETA ?" in ln and ln.endswith("running: level1/slow_task") for ln in beats), beats
    assert lines[-1].startswith("bench: 1/2 (50%)") and "correct=1" in lines[-1] and "running" not in lines[-1]
    time.sleep(0.3)
    assert out.getvalue().splitlines() == lines  # closed: the heartbeat stopped


def test_running_names_a_few_and_counts_the_rest() -> None:
    with Progress(9, enabled=False) as p:
        for k in range(5):
            p.begin(f"t{k}")
        p.end("t0")
        assert p.line().endswith("running: t1, t2, t3 (+1)")


def test_the_interval_comes_from_the_environment(monkeypatch: Any) -> None:
    monkeypatch.setenv("MUSAENV_PROGRESS_INTERVAL_S", "0.25")
    assert Progress(1, enabled=False).interval_s == 0.25
    monkeypatch.setenv("MUSAENV_PROGRESS_INTERVAL_S", "soon")
    assert Progress(1, enabled=False).interval_s == 30.0


def test_bench_off_a_terminal_beats_while_a_slow_sample_runs(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """``musaenv bench`` in a job log: a slow sample (a cold build) gets lines naming it before anything finishes."""
    from musaenv.bench.runner import BenchOptions, run_bench
    from tests.unit.bench.test_runner import Double, _samples

    class Slow(Double):
        def _evaluate(self, task: Any, response: str) -> Any:
            time.sleep(0.6 if task.id == "l1_relu" else 0.0)
            return super()._evaluate(task, response)

    ev = Slow(max_in_flight=2)
    opts = BenchOptions(backend="cpu", progress=True, progress_interval_s=0.1)
    try:
        with caplog.at_level(logging.INFO, logger="musaenv.progress"):
            run_bench(_samples({"l1_relu": ["correct:1.5"], "l1_add": ["incorrect"]}), tmp_path, opts, evaluator=ev)
    finally:
        ev.close()
    msgs = [r.getMessage() for r in caplog.records if r.name == "musaenv.progress"]
    waiting = [m for m in msgs if m.startswith("bench: 1/2 (50%)") and "running: l1_relu#0" in m]
    assert len(waiting) >= 2 and "ETA " in waiting[0] and "/min" in waiting[0], msgs
    assert msgs[-1].startswith("bench: 2/2 (100%)") and "running" not in msgs[-1], msgs
