"""The verdict's parent-side measurements, on hand-built records: refused builds, cores over budget, reused inputs."""

from __future__ import annotations

import numpy as np
import pytest

from musaenv.evaluator.candidate import CandidateRun
from musaenv.evaluator.cpu_watch import PhaseUsage, over_budget
from musaenv.evaluator.reference import RefOutputs
from musaenv.evaluator.verdict import judge
from musaenv.isolation.messages import Timing
from musaenv.timing.paired import PairedSamples
from musaenv.types import EvalResult, Stage, TimingStats
from musaenv.verification.runtime import RuntimeSettings

OFF = RuntimeSettings("off", False)


def _pair(samples_ms: list[float] | None = None) -> tuple[CandidateRun, RefOutputs]:
    rng = np.random.default_rng(0)
    outs = [[rng.standard_normal((8, 8)).astype(np.float32)] for _ in range(3)]
    run = CandidateRun(trials=[(o, ["float32"], []) for o in outs])
    ref = RefOutputs(trials=[(o, ["float32"]) for o in outs])
    if samples_ms is not None:
        run.timing = (Timing(samples_ms=samples_ms), [])
        ref.timing = TimingStats.from_samples([10.0] * 5)
    return run, ref


def _judge(run: CandidateRun, ref: RefOutputs, device: str = "cpu") -> EvalResult:
    return judge(run, ref, task_id="t", backend="cpu", device=device, atol=1e-5, rtol=1e-5, log_chars=500, runtime=OFF)


def test_a_refused_build_is_a_format_error_whatever_the_worker_said() -> None:
    run, ref = _pair()
    run.refused_log = "build flag '-wrapper' in extra_cflags is not allowed; allowed: ..."
    run.failure = ("compile_error", "building extension failed")
    r = _judge(run, ref)
    assert r.stage is Stage.FORMAT_ERROR and "-wrapper" in r.compiler_log


def test_cores_over_the_budget_while_timed_are_cheating_on_the_cpu_only() -> None:
    run, ref = _pair([10.0] * 5)
    run.cpu = [PhaseUsage("trials", 1.0, 3.0, 2, 2), PhaseUsage("timing", 1.0, 2.6, 2, 6)]
    assert _judge(run, ref).stage is Stage.CHEATING and "cpu_overuse" in _judge(run, ref).flags
    assert _judge(run, ref, device="cuda").stage is Stage.CORRECT  # host threads of a GPU kernel are not timed
    run.cpu = [PhaseUsage("trials", 1.0, 3.0, 2, 2)]  # many cores while untimed: no advantage, no verdict
    assert _judge(run, ref).stage is Stage.CORRECT


@pytest.mark.parametrize(
    ("wall_s", "cpu_s", "budget", "over"),
    [(1.0, 1.05, 1, False), (1.0, 1.2, 1, False), (1.0, 1.5, 1, True), (1.0, 2.0, 2, False), (0.05, 0.2, 1, False)],
)
def test_over_budget_bound(wall_s: float, cpu_s: float, budget: int, over: bool) -> None:
    assert over_budget(PhaseUsage("timing", wall_s, cpu_s, 1, 1), budget) is over


def test_timed_calls_on_reused_inputs_do_not_count_for_the_median() -> None:
    # warm-up 3, pool 16, 20 timed calls: calls 13-19 repeat an input; a content-keyed cache answers them in 0.01 ms
    samples = [float(ms) for ms in range(1, 14)] + [0.01] * 7
    run, ref = _pair(samples)
    run.timing_layout = (3, 16)
    r = _judge(run, ref)
    assert r.stage is Stage.CORRECT and r.runtime_ms == pytest.approx(7.0) and r.speedup == pytest.approx(10 / 7)
    run.timing_layout = None  # without the layout every call counts: the cache would have halved the median
    assert _judge(run, ref).runtime_ms == pytest.approx(3.5)
    run.timing_layout = (3, 3)  # no timed call sees a new input: all counted, and said
    r = _judge(run, ref)
    assert "timing_inputs_reused" in r.warnings


def _paired(cand_own_ms: list[float], cand_out_ms: float = 3.0) -> PairedSamples:
    n = len(cand_own_ms)
    ratios = [2.0 + 0.1 * i for i in range(n)]  # reference / candidate per pair: 2.0 ... 3.9
    return PairedSamples(
        ref_ms=[4.0 * r for r in ratios], cand_ms=[4.0] * n, ref_own_ms=[4.0 * r for r in ratios],
        cand_own_ms=cand_own_ms, ref_first=[i % 2 == 0 for i in range(n)], clock="cpu",
        ref_out_ms=[3.0] * n, cand_out_ms=[cand_out_ms] * n,
    )  # fmt: skip


def test_paired_timing_decides_the_speedup_with_its_interval_over_fresh_inputs() -> None:
    run, ref = _pair([0.5] * 20)  # the worker's own samples: not what the speedup is made of
    run.paired = _paired([4.1] * 20)
    run.timing_layout = (3, 16)  # pairs 13-19 repeat an input: 13 pairs count
    r = _judge(run, ref)
    assert r.stage is Stage.CORRECT, r.to_dict()
    assert r.timing_pairs == 13 and r.speedup == pytest.approx(2.6)  # median of ratios 2.0 ... 3.2
    assert (r.speedup_low, r.speedup_high) == (pytest.approx(2.2), pytest.approx(3.0))  # ranks 3 and 11 of 13
    assert r.runtime_ms == pytest.approx(4.0) and r.ref_timing is not None and r.ref_timing.n == 13


def test_pairs_a_major_fault_struck_leave_the_speedup_and_say_so() -> None:
    """The candidate's windows of pairs 0 and 1 waited on pages read back from disk (the host's memory pressure):
    those pairs leave the median and the interval, the count says 11, and extra says which and why."""
    run, ref = _pair([0.5] * 20)
    clean = _paired([4.1] * 20)
    faults = [(0, 0)] * 20
    struck = [(50, 2), (40, 1)] + [(0, 0)] * 18
    run.paired = PairedSamples(**{**clean.__dict__, "ref_faults": faults, "cand_faults": struck})
    run.timing_layout = (3, 16)  # 13 pairs on fresh inputs, two of them struck
    r = _judge(run, ref)
    assert r.stage is Stage.CORRECT and r.timing_pairs == 11
    assert r.speedup == pytest.approx(2.7)  # median of 2.2 ... 3.2
    assert r.extra["timing_faults"] == {"minor_median": {"reference": 0, "candidate": 0.0},
                                        "major_pairs": [0, 1], "left_out": [0, 1]}  # fmt: skip


def test_forged_own_samples_are_cheating_and_work_outside_the_window_is_warned() -> None:
    run, ref = _pair([0.2] * 20)
    run.paired = _paired([0.2] * 20)  # the worker says 0.2 ms where the parent counted 4 ms of CPU
    r = _judge(run, ref)
    assert r.stage is Stage.CHEATING and "timing_forged" in r.flags
    evidence = r.extra["timing_forged"]  # what was judged, call by call, for the user to see
    assert evidence["cand_ms"] == [4.0] * 20 and evidence["cand_own_ms"] == [0.2] * 20
    assert evidence["clock"] == "cpu" and evidence["threads"] == 1 and "measured its timed calls" in evidence["why"]
    assert len(evidence["ref_ms"]) == len(evidence["ref_own_ms"]) == 20
    run.paired = _paired([4.1] * 20, cand_out_ms=9.0)  # 6 ms more than the reference between calls
    r = _judge(run, ref)  # a warning until calibrated: honest sub-millisecond kernels tripped it under load
    assert r.stage is not Stage.CHEATING and "timing_work_outside" in r.warnings and not r.flags
