"""The verdict's stages, each on hand-built records: early verdicts, trial comparison, timed-output rechecks,
cheating flags, timing."""

from __future__ import annotations

import numpy as np
import pytest

from musaenv.evaluator.candidate import CandidateRun
from musaenv.evaluator.plan import StressTrial
from musaenv.evaluator.reference import RefOutputs
from musaenv.evaluator.verdict import (
    attach_timing,
    base_result,
    cheating_flags,
    compare_trials,
    early_verdict,
    judge,
    timed_outputs_agree,
)
from musaenv.isolation.messages import Timing
from musaenv.types import BuildRecord, Stage, TimingStats
from musaenv.verification.runtime import RuntimeFindings, RuntimeSettings

TOL = (1e-5, 1e-5)
OFF = RuntimeSettings("off", False)


def _outs(n: int = 3, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((4, 4)).astype(np.float32)] for _ in range(n)]


def _pair(cand: list[list[np.ndarray]] | None = None) -> tuple[CandidateRun, RefOutputs]:
    ref_outs = _outs()
    cand = ref_outs if cand is None else cand
    return CandidateRun(trials=[(o, ["float32"], []) for o in cand]), RefOutputs(
        trials=[(o, ["float32"]) for o in ref_outs]
    )


def _base(run: CandidateRun) -> object:
    return base_result(run, "t", "cpu", "cpu", 200, ("static_warning",))


def test_base_result_carries_ids_builds_and_static_warnings() -> None:
    builds = [BuildRecord("a", True, 1.0, True), BuildRecord("b", True, 1.0, True)]
    run = CandidateRun(builds=builds, compile_log="x" * 500)
    base = base_result(run, "t", "cpu", "cpu", 100, ("w",))
    assert (base.task_id, base.backend, base.device, base.warnings, base.build_cached) == (
        "t",
        "cpu",
        "cpu",
        ("w",),
        True,
    )
    assert len(base.compiler_log) < 200 and "characters cut" in base.compiler_log
    assert base_result(CandidateRun(), "t", "cpu", "cpu", 100, ()).build_cached is None  # nothing built


@pytest.mark.parametrize(
    ("setup", "stage", "flag"),
    [
        ({"infra_log": "the builder died"}, Stage.INFRA_ERROR, None),
        ({"refused_log": "flag -wrapper refused", "failure": ("compile_error", "x")}, Stage.FORMAT_ERROR, None),
        ({"failure": ("input_error", "draw failed")}, Stage.INFRA_ERROR, "task_inputs"),
        ({"failure": ("not_built", "nothing built")}, Stage.INFRA_ERROR, "not_built"),
        ({"failure": ("compile_error", "error: x")}, Stage.COMPILE_ERROR, None),
        ({"failure": ("cheating", "forged"), "flags": ["protocol_violation"]}, Stage.CHEATING, "protocol_violation"),
        ({"failure": ("timeout", "slow")}, Stage.TIMEOUT, None),
        ({"compile_only": True}, Stage.COMPILED, None),
        # a refused module is cheating even when the worker then failed with a compile error (its load_inline failed)
        ({"binary_flags": ["dynamic_code"], "failure": ("compile_error", "refused")}, Stage.CHEATING, "dynamic_code"),
    ],
)
def test_early_verdicts(setup: dict[str, object], stage: Stage, flag: str | None) -> None:
    run = CandidateRun(**setup)  # type: ignore[arg-type]
    result = early_verdict(run, _base(run), 200)  # type: ignore[arg-type]
    assert result is not None and result.stage is stage
    assert flag is None or flag in result.flags
    if stage is Stage.COMPILE_ERROR:
        assert result.compiler_log == "error: x" and result.device is None and not result.runtime_log


def test_no_early_verdict_for_a_run_with_outputs() -> None:
    run, _ = _pair()
    assert early_verdict(run, _base(run), 200) is None  # type: ignore[arg-type]


def test_compare_trials_counts_passes_worst_errors_and_flags() -> None:
    ref = _outs()
    cand = [ref[0], [ref[1][0] + 1e-3], ref[2]]  # trial 2 off by 1e-3
    run, rec = _pair(cand)
    run.trials[2] = (ref[2], ["float32"], ["input_mutation"])  # right values, but flagged
    cmp = compare_trials(run, rec, *TOL)
    assert (cmp.passed, cmp.total, cmp.mask) == (1, 3, (True, False, False))
    assert cmp.flags == ("input_mutation",) and cmp.max_abs_error == pytest.approx(1e-3, rel=1e-2)
    assert len(cmp.messages) == 1 and cmp.messages[0].startswith("trial 2:")


def test_a_failed_stress_trial_is_incorrect_and_says_how_its_inputs_were_made() -> None:
    kwargs = {"task_id": "t", "backend": "cpu", "device": "cpu", "atol": TOL[0], "rtol": TOL[1], "log_chars": 100}
    ref = _outs()
    nan = [np.full_like(ref[2][0], np.nan)]  # a softmax without max subtraction on the offset inputs
    run, rec = _pair([ref[0], ref[1], nan])
    rec.stress, rec.skips = {2: StressTrial(0, 7, 12.0, 480.0)}, ["", "", ""]
    result = judge(run, rec, runtime=OFF, **kwargs)  # type: ignore[arg-type]
    assert result.stage is Stage.INCORRECT and (result.trials_passed, result.trials_total) == (2, 3)
    assert "trial 3 (a stress trial, inputs scaled by 12 and offset by 480)" in result.messages[0]
    assert "overflow" in result.messages[0] and "cancellation" in result.messages[0]
    assert result.extra["stress"] == {"trials": 1, "skipped": []}


def test_stress_trials_only_take_away() -> None:
    """A wrong kernel that a stress trial's inputs happen not to expose (a leaky ReLU on inputs offset far above
    zero) must not gain q from it: with a trial on the task's own inputs failed, stress trials count for nothing
    (q = 0 stays q = 0, and its -1); with all of those passed, they count like any other trial."""
    ref = _outs()
    run, rec = _pair([[ref[0][0] + 1.0], [ref[1][0] + 1.0], ref[2]])  # both own trials wrong, the stress one right
    rec.stress, rec.skips = {2: StressTrial(0, 7, 12.0, 480.0)}, ["", "", ""]
    cmp = compare_trials(run, rec, *TOL)
    assert (cmp.passed, cmp.total) == (0, 2)
    run, rec = _pair([ref[0], ref[1], ref[2]])
    rec.stress, rec.skips = {2: StressTrial(0, 7, 12.0, 480.0)}, ["", "", ""]
    assert (compare_trials(run, rec, *TOL).passed, compare_trials(run, rec, *TOL).total) == (3, 3)


def test_a_stress_trial_the_reference_dropped_is_not_charged() -> None:
    ref = _outs()
    run, rec = _pair([ref[0], ref[1], [ref[2][0] + 1.0]])
    rec.stress, rec.skips = {2: StressTrial(1, 7, 60.0, 0.0)}, ["", "", "the reference's outputs are not finite"]
    cmp = compare_trials(run, rec, *TOL)
    assert (cmp.passed, cmp.total, cmp.mask, cmp.messages) == (2, 2, (True, True, False), ())
    assert cmp.skipped == ("trial 3 (inputs scaled by 60 and offset by 0): the reference's outputs are not finite",)
    rec.stress = {}  # only a stress trial can be dropped: a reason beside an ordinary trial changes nothing
    assert compare_trials(run, rec, *TOL).total == 3


def _timed(kept: list[int], counts: list[int], arrays: list[np.ndarray], prints: list[object] | None = None) -> Timing:
    return Timing(samples_ms=[1.0] * 5, kept=kept, kept_counts=counts, fingerprints=prints or [])


def test_timed_outputs_agree_only_for_exactly_the_rechecked_calls() -> None:
    run, ref = _pair()
    outs = _outs(2, seed=7)
    ref.rechecks, ref.recheck_calls = [(o, ["float32"]) for o in outs], [0, 4]
    run.timing = (_timed([0, 4], [1, 1], []), [outs[0][0], outs[1][0]])
    assert timed_outputs_agree(run, ref, *TOL)
    run.timing = (_timed([0, 3], [1, 1], []), [outs[0][0], outs[1][0]])  # another call than the one rechecked
    assert not timed_outputs_agree(run, ref, *TOL)
    run.timing = (_timed([0, 4], [1, 1], []), [outs[0][0], outs[0][0]])  # a replayed output
    assert not timed_outputs_agree(run, ref, *TOL)
    run.timing = None  # nothing timed: nothing to recheck
    assert timed_outputs_agree(run, ref, *TOL)


def test_timed_outputs_agree_checks_probed_fingerprints() -> None:
    run, ref = _pair()
    ref.rechecks, ref.recheck_calls = [([np.zeros(2, np.float32)], ["float32"])], [0]
    stats = [[[4.0, 8.0, 4.0, 2]]]  # sum, sum of squares, sum |r|, n of one block
    ref.probe_calls, ref.probe_stats = [2], [stats]
    good = [[[[4.0, 8.0, 4.0, 2]]]] * 3
    bad = [*good[:2], [[[40.0, 800.0, 40.0, 2]]]]
    run.timing = (_timed([0], [1], [], good), [np.zeros(2, np.float32)])
    assert timed_outputs_agree(run, ref, *TOL)
    run.timing = (_timed([0], [1], [], bad), [np.zeros(2, np.float32)])
    assert not timed_outputs_agree(run, ref, *TOL)
    run.timing = (_timed([0], [1], [], good[:2]), [np.zeros(2, np.float32)])  # the probed call is missing
    assert not timed_outputs_agree(run, ref, *TOL)


def test_cheating_flags_collects_each_flag_once() -> None:
    run, ref = _pair()
    run.trials[0] = (run.trials[0][0], ["float32"], ["output_aliases_input"])
    rt = RuntimeFindings()
    rt.add("thread_started", "a thread", error=True)
    rt.add("output_aliases_input", "again", error=True)
    cmp = compare_trials(run, ref, *TOL)
    assert cheating_flags(run, ref, cmp, rt, "cpu", TOL) == ["output_aliases_input", "thread_started"]
    honest, _ = _pair()
    assert cheating_flags(honest, ref, compare_trials(honest, ref, *TOL), RuntimeFindings(), "cpu", TOL) == []


def test_attach_timing_gives_the_speedup_against_the_reference() -> None:
    run, ref = _pair()
    run.timing = (Timing(samples_ms=[2.0, 2.0, 2.0]), [])
    ref.timing = TimingStats.from_samples([6.0] * 3)
    correct = base_result(run, "t", "cpu", "cpu", 100, ()).replace(stage=Stage.CORRECT)
    timed = attach_timing(correct, run, ref, RuntimeFindings(), OFF)
    assert timed.runtime_ms == pytest.approx(2.0) and timed.speedup == pytest.approx(3.0)
    run.timing = None
    assert attach_timing(correct, run, ref, RuntimeFindings(), OFF).speedup is None


def test_judge_composes_the_stages() -> None:
    kwargs = {"task_id": "t", "backend": "cpu", "device": "cpu", "atol": TOL[0], "rtol": TOL[1], "log_chars": 100}
    run, ref = _pair()
    assert judge(run, ref, runtime=OFF, **kwargs).stage is Stage.CORRECT  # type: ignore[arg-type]
    wrong, ref = _pair(_outs(seed=1))
    result = judge(wrong, ref, runtime=OFF, **kwargs)  # type: ignore[arg-type]
    assert result.stage is Stage.INCORRECT and result.trials_passed == 0 and len(result.messages) == 3
