"""The parent-side rules of the runtime checks, on synthetic worker reports (fast: no compiler, no worker).

Also: each C++-side cheat alone must be refused by the static C++ scan, because some of them (direct CPU kernels,
RecordFunction switched off) are invisible to the runtime profiler.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from musaenv.isolation.messages import ProtocolError, decode
from musaenv.isolation.reports import (
    OpTime,
    ProfileReport,
    RuntimeReports,
    Tampered,
    Threads,
    TimingReport,
    TrialsReport,
)
from musaenv.verification import analyze_candidate
from musaenv.verification.runtime import (
    RuntimeFindings,
    RuntimeSettings,
    assess_runtime,
    checked_speedup,
    forbidden_ops,
    input_dependence_failures,
    is_allowed_aten_op,
)
from tests.adversarial.hostile_kernels import DIRTY_HEADER, DIRTY_SNIPPETS

STRICT = RuntimeSettings(policy="strict", checks=True)
TOL = (1e-4, 1e-4)


def _trials(n: int = 3, scale: float = 1.0, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[np.maximum(rng.standard_normal((16, 32)), 0).astype(np.float32) * scale] for _ in range(n)]


def _report(**fields: Any) -> RuntimeReports:
    return RuntimeReports(trials=TrialsReport(**{"kernel_calls": [1, 1, 1], "repeat_calls": 1, **fields}))


@pytest.mark.parametrize("name", ["aten::empty_like", "aten::view", "aten::_to_copy", "aten::_cast_Float", "aten::t"])
def test_plumbing_is_allowed(name: str) -> None:
    assert is_allowed_aten_op(name)


@pytest.mark.parametrize("name", ["aten::relu", "aten::add", "aten::mm", "aten::cat", "aten::index", "aten::linear"])
def test_compute_is_forbidden(name: str) -> None:
    assert not is_allowed_aten_op(name)
    assert forbidden_ops([OpTime(name, cpu_us=1.0)])


def test_strict_profile_with_compute_is_an_error_and_permissive_a_warning() -> None:
    profile = ProfileReport(ok=True, wall_us=100.0, ops=[OpTime("aten::relu", cpu_us=40.0), OpTime("aten::view")])
    ref = _trials()
    for policy, flagged in (("strict", True), ("permissive", False)):
        out = assess_runtime(_report(profile=profile), [], ref, ref, [True] * 3, TOL, RuntimeSettings(policy, True))
        assert ("forbidden_aten_op" in out.flags) is flagged
        assert ("forbidden_aten_op" in out.warnings) is not flagged
        assert out.extra["coverage"]["basis"] == "host"


def test_constant_output_on_a_varying_reference_is_flagged() -> None:
    ref = _trials(scale=1e-6)
    zeros = [[np.zeros_like(r[0])] for r in ref]
    assert input_dependence_failures(zeros, ref, [True] * 3)
    out = assess_runtime(_report(), [], zeros, ref, [True] * 3, TOL, STRICT)
    assert "output_independent_of_input" in out.flags


def test_correct_output_with_rounding_error_is_not_flagged() -> None:
    ref = _trials(scale=1e-6)
    rng = np.random.default_rng(1)
    cand = [[(r[0] * (1 + 1e-6 * rng.standard_normal(r[0].shape))).astype(np.float32)] for r in ref]
    assert input_dependence_failures(cand, ref, [True] * 3) == []


def test_constant_reference_is_not_judged() -> None:
    ref = [[np.full((4, 4), 2.0, np.float32)] for _ in range(3)]
    assert input_dependence_failures(ref, ref, [True] * 3) == []


def test_poisoned_repeat_that_fails_is_an_error_and_bit_noise_a_warning() -> None:
    ref = _trials()
    cand = [[r[0].copy()] for r in ref]
    nan_repeat = [np.where(ref[0][0] > 0, ref[0][0], np.nan).astype(np.float32)]
    out = assess_runtime(_report(repeat_outputs=1), nan_repeat, cand, ref, [True] * 3, TOL, STRICT)
    assert "nondeterministic" in out.flags
    noisy = [np.nextafter(ref[0][0], np.float32(np.inf)).astype(np.float32)]
    out = assess_runtime(_report(repeat_outputs=1), noisy, cand, ref, [True] * 3, TOL, STRICT)
    assert "nondeterministic" not in out.flags and "nondeterministic_bits" in out.warnings


def test_unchanged_output_after_overwriting_the_kernel_result_is_flagged() -> None:
    ref = _trials()
    cand = [[r[0].copy()] for r in ref]
    out = assess_runtime(_report(perturb_outputs=1), [cand[0][0].copy()], cand, ref, [True] * 3, TOL, STRICT)
    assert out.flags == ["output_not_from_kernel"]
    changed = [cand[0][0] + 1.0]
    out = assess_runtime(_report(perturb_outputs=1), changed, cand, ref, [True] * 3, TOL, STRICT)
    assert out.flags == []


def test_the_old_answer_after_an_in_place_rewrite_is_flagged() -> None:
    ref = _trials()
    cand = [[r[0].copy()] for r in ref]
    report = _report(repeat_outputs=1, rewrite_outputs=1, rewrite_trial=2)
    stale = [cand[0][0].copy(), cand[0][0].copy()]  # the repeat, then trial 1's answer for trial 3's values
    out = assess_runtime(report, stale, cand, ref, [True] * 3, TOL, STRICT)
    assert out.flags == ["stale_output"]
    fresh = [cand[0][0].copy(), ref[2][0].copy()]
    assert assess_runtime(report, fresh, cand, ref, [True] * 3, TOL, STRICT).flags == []
    # not judged when the candidate failed that trial fresh (its own error, reported as incorrect already)
    assert assess_runtime(report, stale, cand, ref, [True, True, False], TOL, STRICT).flags == []
    # both calls sent: a cache that found an earlier trial's entry at the fresh tensors' address answers the first
    # call (trial 1's values) with that trial's output, and the second one right when that trial is the one written in
    both = _report(repeat_outputs=1, rewrite_outputs=1, rewrite_calls=2, rewrite_trial=2)
    reused = [cand[0][0].copy(), ref[2][0].copy(), ref[2][0].copy()]
    out = assess_runtime(both, reused, cand, ref, [True] * 3, TOL, STRICT)
    assert out.flags == ["stale_output"] and "fresh tensors" in out.messages[0]
    right = [cand[0][0].copy(), ref[0][0].copy(), ref[2][0].copy()]
    assert assess_runtime(both, right, cand, ref, [True] * 3, TOL, STRICT).flags == []


def test_missing_kernel_calls_and_cached_repeat_are_flagged() -> None:
    ref = _trials()
    out = assess_runtime(_report(kernel_calls=[1, 0, 1]), [], ref, ref, [True] * 3, TOL, STRICT)
    assert out.flags == ["no_kernel_call"]
    out = assess_runtime(_report(repeat_calls=0), [], ref, ref, [True] * 3, TOL, STRICT)
    assert out.flags == ["no_kernel_call"]
    timing = TimingReport(kernel_calls=3, forward_calls=9)
    out = assess_runtime(_report().add(timing), [], ref, ref, [True] * 3, TOL, STRICT)
    assert out.flags == ["no_kernel_call"]


def test_threads_settings_and_tampering_are_flagged() -> None:
    ref = _trials()
    report = _report(
        threads=Threads(base=3, max_seen=4),
        global_state=["num_threads: 1 -> 4"],
        tampered=Tampered(timer=["time.perf_counter_ns"], harness=["torch.allclose"]),
    )
    out = assess_runtime(report, [], ref, ref, [True] * 3, TOL, STRICT)
    assert set(out.flags) == {"thread_started", "global_state_changed", "timer_tampering", "harness_tampering"}


def test_cpu_time_beyond_the_allowed_threads_is_flagged() -> None:
    ref = _trials()
    report = _report(threads=Threads(base=2, max_seen=2, overuse=["1.9 cores busy (1 allowed)"]))
    out = assess_runtime(report, [], ref, ref, [True] * 3, TOL, STRICT)
    assert out.flags == ["thread_started"]


def test_checks_off_judges_nothing_but_the_profile() -> None:
    ref = _trials()
    report = _report(kernel_calls=[0, 0, 0], threads=Threads(base=1, max_seen=9))
    out = assess_runtime(report, [], ref, ref, [True] * 3, TOL, RuntimeSettings("off", False))
    assert out.flags == [] and out.warnings == []


def test_suspicious_speedup_is_recomputed_from_the_slower_measurement() -> None:
    out = RuntimeFindings()
    counted = checked_speedup(100.0, 10.0, 0.1, [2.0, 2.5, 3.0], STRICT, out)
    assert counted == pytest.approx(10.0 / 2.5)
    assert set(out.warnings) == {"suspicious_speedup", "timing_inconsistent"}
    plain = RuntimeFindings()
    assert checked_speedup(2.0, 10.0, 5.0, [5.1, 4.9, 5.0], STRICT, plain) == 2.0
    assert plain.warnings == []


SNIPPET_PARAMS = sorted(DIRTY_SNIPPETS)


@pytest.mark.parametrize("name", SNIPPET_PARAMS)
def test_static_scan_refuses_each_cpp_cheat_alone(name: str) -> None:
    source = (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        f'CPP = r"""{DIRTY_HEADER}\n{DIRTY_SNIPPETS[name]}\n"""\n'
        f'ext = load_inline(name="one", cpp_sources=CPP, functions=["{name}"])\n\n\n'
        "class ModelNew(nn.Module):\n    def forward(self, x):\n"
        f"        return ext.{name}(x)\n"
    )
    report = analyze_candidate(source, policy="strict", backend="cpu")
    assert report.errors, f"the static scan let {name} through: {report.messages}"


def test_a_forged_runtime_report_is_a_verdict_not_a_crash() -> None:
    from musaenv.evaluator.candidate import CandidateRun
    from musaenv.evaluator.reference import RefOutputs
    from musaenv.evaluator.verdict import judge
    from musaenv.types import Stage

    forged = {**TrialsReport().to_dict(), "kernel_calls": ["many"], "threads": [1, 2]}
    with pytest.raises(ProtocolError):  # the parent's reader refuses it: protocol_violation before any judging
        decode(forged, TrialsReport, TimingReport)
    ref = _trials()
    run = CandidateRun(trials=[(r, ["float32"], []) for r in ref])
    # a forged profile body is refused at decoding; one that got past it (no type is checked on a record built in
    # this process) is judged, not a crash
    with pytest.raises(ProtocolError):
        decode({**TrialsReport().to_dict(), "profile": {"ok": True, "ops": [1, 2]}}, TrialsReport)
    run.runtime = _report(profile=ProfileReport(ok=True, ops=[1, 2]))  # type: ignore[list-item]
    result = judge(
        run,
        RefOutputs(trials=[(r, ["float32"]) for r in ref]),
        task_id="t",
        backend="cpu",
        device="cpu",
        atol=TOL[0],
        rtol=TOL[1],
        log_chars=1000,
        runtime=STRICT,
    )
    assert result.stage is Stage.CHEATING and result.flags == ("protocol_violation",)
