"""Turn a candidate run and reference outputs into an :class:`EvalResult` (no torch).

Size: one concept, the verdict's stages in the order :func:`judge` calls them (early verdict, trials with their
stress trials, cheating flags, timing); the trial comparison is the piece to move out next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from musaenv.backends import REGISTRY
from musaenv.evaluator.candidate import CandidateRun
from musaenv.evaluator.cpu_watch import over_budget
from musaenv.evaluator.plan import first_use_calls
from musaenv.evaluator.reference import RefOutputs
from musaenv.timing.method import METHODS, TimingFindings, TimingMethod
from musaenv.types import EvalResult, Stage, build_tier_of
from musaenv.verification.compare import compare_outputs, compare_stressed, fingerprints_agree, trivial_output_passes
from musaenv.verification.rules import by_layer, message
from musaenv.verification.runtime import RuntimeFindings, RuntimeSettings, assess_runtime, checked_speedup

__all__ = [
    "TrialComparison",
    "attach_timing",
    "base_result",
    "cheating_flags",
    "compare_trials",
    "early_verdict",
    "judge",
    "timed_outputs_agree",
    "unconditioned_misses",
]

# Flags the worker raises on outputs and inputs, and the timing checks', with the sentence the policy reads: a view
# of the rule table (musaenv.verification.rules).
WORKER_FLAGS = {r.name: r.message for r in by_layer("worker", "timing")}


def _cpu_overuse(run: CandidateRun, device: str | None) -> bool:
    """The timing phase used more cores than the budget (CPU backend: on a GPU the host threads are not timed)."""
    return device == "cpu" and any(u.phase == "timing" and over_budget(u, run.cpu_budget) for u in run.cpu)


# Worker failures that say nothing about the candidate: an ``infra_error`` with this flag and sentence.
NOT_CANDIDATE_FAILURES = {
    "not_built": ("not_built", message("not_built")),
    "input_error": ("task_inputs", message("task_inputs")),
}


#: The worker's failure stage for what the CPU interpreter cannot emulate (musaenv.worker.triton_hook).
NEEDS_GPU = "needs_gpu"


def _needs_gpu(text: str, base: EvalResult, log_chars: int) -> EvalResult:
    """An unscored ``compiled`` verdict flagged ``needs_gpu``: the candidate reached something only a GPU runs.

    Only a backend on its CPU interpreter (triton) may say so; from any other run it is a ``runtime_error``.
    """
    interpreter = getattr(REGISTRY.get(base.backend), "cpu_interpreter", False)
    if not (interpreter and base.device == "cpu"):
        return base.replace(stage=Stage.RUNTIME_ERROR, runtime_log=_truncate(text, log_chars))
    why = text.split("\n", 1)[0]
    return base.replace(
        stage=Stage.COMPILED,
        flags=(NEEDS_GPU,),
        device=None,
        messages=(f"{why} (not scored: run it where a GPU is present)",),
        runtime_log=_truncate(text, log_chars),
    )


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


@dataclass(frozen=True)
class TrialComparison:
    """The candidate's correctness trials against the reference's, trial by trial.

    Attributes:
        passed: Trials whose outputs match and that the worker raised no flag on.
        total: Reference trials that count (the number that must pass): all but the dropped stress trials, and
            the task's own trials only when one of them failed.
        max_abs_error: Worst absolute error over all counted trials (``None``: nothing comparable).
        max_rel_error: Worst relative error over all counted trials.
        messages: Why the first (up to 3) failing trials failed.
        flags: The worker's flags on any trial (each once, in order).
        mask: Per trial, whether it passed (the runtime checks compare only passing trials).
        skipped: Per stress trial the reference dropped, which and why (not charged).
    """

    passed: int
    total: int
    max_abs_error: float | None
    max_rel_error: float | None
    messages: tuple[str, ...]
    flags: tuple[str, ...]
    mask: tuple[bool, ...]
    skipped: tuple[str, ...] = ()


# What a failed stress trial tells the model: the inputs it failed on, and the two usual reasons.
STRESS_HINT = (
    "the reference stays finite and well-conditioned there: check overflow (subtract the max before exp) and "
    "cancellation (a one-pass E[x^2] - E[x]^2 variance; use two passes or Welford)"
)


def compare_trials(run: CandidateRun, ref: RefOutputs, atol: float, rtol: float) -> TrialComparison:
    """Compare each trial's outputs with the reference's (``run.trials`` and ``ref.trials`` pair up in order).

    A stress trial (``ref.stress``) the reference dropped (``ref.skips``) counts for nothing; a failed one names
    its transform. Stress trials can only take away: they count (passed and total) only when every trial on the
    task's own inputs passed, so a wrong kernel that a stress trial's inputs happen not to expose (a leaky ReLU on
    inputs offset far above zero) keeps q = 0 and its -1. The worker's flags count on every trial."""
    passed, total, worst_abs, worst_rel = 0, 0, None, None
    own_failed, stress_passed, stress_total = False, 0, 0
    messages: list[str] = []
    flags: list[str] = []
    mask: list[bool] = []
    skipped: list[str] = []
    for i, ((arrays, dtypes, tflags), (rarr, rdt)) in enumerate(zip(run.trials, ref.trials)):
        flags.extend(f for f in tflags if f not in flags)
        stress = ref.stress.get(i)
        skip = ref.skips[i] if stress is not None and i < len(ref.skips) else ""
        if stress is not None and skip:
            skipped.append(f"trial {i + 1} ({stress.describe()}): {skip}")
            mask.append(False)
            continue
        cmp = (compare_outputs if stress is None else compare_stressed)(arrays, rarr, atol, rtol, dtypes, rdt)
        if cmp.max_abs_error is not None:
            worst_abs = max(worst_abs or 0.0, cmp.max_abs_error)
            worst_rel = max(worst_rel or 0.0, cmp.max_rel_error or 0.0)
        ok = cmp.passed and not tflags
        mask.append(ok)
        if stress is not None:
            stress_total, stress_passed = stress_total + 1, stress_passed + ok
        else:
            total, passed, own_failed = total + 1, passed + ok, own_failed or not ok
        if not ok and cmp.reason and len(messages) < 3:
            where = "" if stress is None else f" (a stress trial, {stress.describe()})"
            hint = "" if stress is None else f"; {STRESS_HINT}"
            messages.append(f"trial {i + 1}{where}: {cmp.reason}{hint}")
    if not own_failed:
        passed, total = passed + stress_passed, total + stress_total
    return TrialComparison(
        passed, total, worst_abs, worst_rel, tuple(messages), tuple(flags), tuple(mask), tuple(skipped)
    )


def unconditioned_misses(run: CandidateRun, ref: RefOutputs, atol: float, rtol: float) -> list[int]:
    """The stress trials whose conditioning decides the verdict: those the reference kept (finite outputs) and
    the candidate missed, when every trial on the task's own inputs passed (else stress trials count for nothing).

    The reference worker judges conditioning (its float64 run) only for these, on request
    (:meth:`~musaenv.evaluator.reference.ReferenceService.condition`): for a trial the candidate passed, dropping
    it would change the trial count and nothing else. The task's own trials are compared only once a stress trial
    was missed (rare for an honest kernel: :func:`compare_trials` compares them anyway)."""
    pairs = list(enumerate(zip(run.trials, ref.trials)))
    misses = [
        i
        for i, ((arrays, dtypes, _), (rarr, rdt)) in pairs
        if i in ref.stress
        and not (i < len(ref.skips) and ref.skips[i])  # dropped already: its outputs are not finite
        and not compare_stressed(arrays, rarr, atol, rtol, dtypes, rdt).passed
    ]
    own_passed = misses and all(
        not tflags and compare_outputs(arrays, rarr, atol, rtol, dtypes, rdt).passed
        for i, ((arrays, dtypes, tflags), (rarr, rdt)) in pairs
        if i not in ref.stress
    )
    return misses if own_passed else []


def timed_outputs_agree(run: CandidateRun, ref: RefOutputs, atol: float, rtol: float) -> bool:
    """True when the kept timed outputs match the reference for the same inputs, and the probed calls'
    fingerprints are consistent with it (every call's, when the eager reference was timed in this run)."""
    if run.timing is None or not ref.rechecks:
        return True
    msg, arrays = run.timing
    if msg.kept != list(ref.recheck_calls):
        return False  # the worker must return exactly the calls the parent rechecks, the last one included
    counts = msg.kept_counts
    n_kept = len(ref.recheck_calls)
    if len(counts) != n_kept:
        return False
    pos = 0
    for (rarr, _), n in zip(ref.rechecks[:n_kept], counts):
        if not compare_outputs(arrays[pos : pos + n], rarr, atol, rtol).passed:
            return False
        pos += n
    prints = msg.fingerprints
    checks = list(zip(ref.probe_calls, ref.probe_stats))
    if ref.timing_prints is not None:  # the reference was timed in this run: every timed call is checked
        checks += list(enumerate(ref.timing_prints[: len(prints)]))
    return all(0 <= call < len(prints) and fingerprints_agree(prints[call], st, atol, rtol) for call, st in checks)


def base_result(
    run: CandidateRun, task_id: str, backend: str, device: str, log_chars: int, static_warnings: Sequence[str]
) -> EvalResult:
    """What every verdict of this run carries: ids, build facts, the sandbox and CPU reports (stage unset)."""
    return EvalResult(
        stage=Stage.INFRA_ERROR,
        task_id=task_id,
        backend=backend,
        device=device,
        compile_time_s=run.compile_time_s,
        warnings=tuple(dict.fromkeys([*static_warnings, *run.binary_warnings])),
        build_cached=all(b.cached for b in run.builds) if run.builds else None,
        build_tier=build_tier_of(run.builds),
        compiler_log=_truncate(run.compile_log, log_chars),
        extra={
            "builds": [b.to_dict() for b in run.builds],
            "sandbox": run.sandbox.report() if run.sandbox is not None else {},
            "cpu": [u.to_dict() for u in run.cpu],
        },
    )


def _infra_message(log_text: str) -> str:
    """The message of a build the machine could not judge: its first line names why (a header this machine lacks,
    a compiler killed from outside, a full disk), so the user is not left with "the build service failed"."""
    first = next((line.strip() for line in log_text.splitlines() if line.strip()), "")
    first = first.replace(" (not the candidate)", "").rstrip(":")
    return f"the build could not be judged on this machine (not the candidate): {first[:300]}"


def early_verdict(run: CandidateRun, base: EvalResult, log_chars: int) -> EvalResult | None:
    """The verdict of a run that produced no outputs to compare (build service failure, refused build, a failed
    or cut-short worker, compile-only); ``None`` when the run's outputs must be compared."""
    if run.infra_log:
        return base.replace(
            stage=Stage.INFRA_ERROR,
            messages=(_infra_message(run.infra_log),),
            runtime_log=_truncate(run.infra_log, log_chars),
        )
    if run.binary_flags:  # the built module imports what the policy refuses: decided before anything ran
        return base.replace(
            stage=Stage.CHEATING, flags=tuple(run.binary_flags), device=None,
            messages=("a built module was refused for the library functions it imports", *run.binary_messages),
        )  # fmt: skip
    if run.refused_log:
        return base.replace(
            stage=Stage.FORMAT_ERROR, device=None, messages=("a build was refused before compiling",),
            compiler_log=_truncate(run.refused_log, log_chars),
        )  # fmt: skip
    if run.failure is not None and run.failure[0] in NOT_CANDIDATE_FAILURES:
        flag, why = NOT_CANDIDATE_FAILURES[run.failure[0]]
        return base.replace(flags=(flag,), messages=(why,), runtime_log=_truncate(run.failure[1], log_chars))
    if run.failure is not None and run.failure[0] == NEEDS_GPU:
        return _needs_gpu(run.failure[1], base, log_chars)
    if run.failure is not None:
        stage, text = run.failure
        is_compile = stage == "compile_error"
        return base.replace(
            stage=Stage(stage),
            flags=tuple(run.flags),
            device=None if is_compile else base.device,
            compiler_log=_truncate(text if is_compile else run.compile_log, log_chars),
            runtime_log="" if is_compile else _truncate(text, log_chars),
        )
    if run.compile_only:
        b = base.backend
        return base.replace(
            stage=Stage.COMPILED,
            device=None,
            messages=(f"compiled for {b}; no {b} device here, so correctness and timing were not run",),
        )
    return None


def cheating_flags(
    run: CandidateRun,
    ref: RefOutputs,
    trials: TrialComparison,
    rt: RuntimeFindings,
    device: str,
    tol: tuple[float, float],
    timed: TimingFindings | None = None,
) -> list[str]:
    """Every cheating flag of a run that produced outputs: the worker's, a timed-output mismatch (checked only
    when every trial passed), cores over budget while timed, the timing method's checks (``timed``, default those
    of :func:`method_of` the run) and the runtime findings', each once."""
    flags = list(trials.flags)
    if trials.passed == trials.total and not timed_outputs_agree(run, ref, *tol):
        flags.append("timed_output_mismatch")
    if _cpu_overuse(run, device):
        flags.append("cpu_overuse")
    flags.extend(f for f in (timed or method_of(run).findings(run.paired)).flags if f not in flags)
    flags.extend(f for f in rt.flags if f not in flags)
    return flags


def judge(
    run: CandidateRun,
    ref: RefOutputs | None,
    *,
    task_id: str,
    backend: str,
    device: str,
    atol: float,
    rtol: float,
    log_chars: int,
    static_warnings: Sequence[str] = (),
    runtime: RuntimeSettings | None = None,
    timing: TimingMethod | None = None,
) -> EvalResult:
    """Assemble the verdict of a candidate run (``ref`` is ``None`` when the candidate never produced outputs).

    In order: :func:`early_verdict`; :func:`compare_trials`; the runtime findings; :func:`cheating_flags`
    (timed-output rechecks included); then ``cheating``, ``incorrect``, or ``correct`` with its timing
    (:func:`attach_timing`). ``runtime`` says how the worker's runtime reports are judged
    (:mod:`musaenv.verification.runtime`); ``None`` judges only what the worker reported with the default
    speedup ceiling. ``timing``: how the run was timed (default :func:`method_of` the run).
    """
    method = timing or method_of(run)
    base = base_result(run, task_id, backend, device, log_chars, static_warnings)
    early = early_verdict(run, base, log_chars)
    if early is not None:
        return early
    assert ref is not None
    settings = runtime or RuntimeSettings(policy="strict", checks=True)
    trials = compare_trials(run, ref, atol, rtol)
    task_own = [r for i, (r, _) in enumerate(ref.trials) if i not in ref.stress]  # the task's inputs, not scaled
    if task_own and all(trivial_output_passes(r, atol, rtol) for r in task_own):
        base = base.replace(warnings=(*base.warnings, "degenerate_task_zeros_pass"))
    rt = _assess(run, ref, list(trials.mask), (atol, rtol), settings)
    result = base.replace(
        trials_passed=trials.passed,
        trials_total=trials.total,
        max_abs_error=trials.max_abs_error,
        max_rel_error=trials.max_rel_error,
        extra={**base.extra, "runtime": rt.extra, **_stress_extra(ref, trials)},
    )
    timed = method.findings(run.paired)
    flags = cheating_flags(run, ref, trials, rt, device, (atol, rtol), timed)
    if flags:
        notes = tuple(WORKER_FLAGS.get(f, f) for f in flags if f not in rt.flags)
        result = result.replace(extra={**result.extra, **timed.extra})  # the evidence, for the user and calibration
        return _finish(result, rt, run, timed).replace(
            stage=Stage.CHEATING, flags=tuple(flags), messages=notes + tuple(rt.messages) + trials.messages
        )
    if trials.passed < trials.total:
        return _finish(result, rt, run, timed).replace(
            stage=Stage.INCORRECT, messages=tuple(rt.messages) + trials.messages
        )
    result = attach_timing(result.replace(stage=Stage.CORRECT), run, ref, rt, settings, method)
    return _finish(result, rt, run, timed).replace(messages=tuple(rt.messages))


def method_of(run: CandidateRun) -> TimingMethod:
    """The timing method a run was measured by, read from what it holds (for callers that do not say): paired
    when the parent clocked its calls, else the reference timed apart."""
    return METHODS["paired"] if run.paired is not None else METHODS["dedicated_host"]


def _stress_extra(ref: RefOutputs, trials: TrialComparison) -> dict[str, object]:
    """``extra["stress"]``: the stress trials run and those dropped (empty when the plan had none)."""
    if not ref.stress:
        return {}
    return {"stress": {"trials": len(ref.stress), "skipped": list(trials.skipped)}}


def _assess(
    run: CandidateRun, ref: RefOutputs, mask: list[bool], tol: tuple[float, float], settings: RuntimeSettings
) -> RuntimeFindings:
    """The runtime findings; a report the parent cannot read is the worker's (so the candidate's) fault."""
    cand = [arrays for arrays, _, _ in run.trials]
    try:
        refs = [r for r, _ in ref.trials]
        return assess_runtime(run.runtime, run.runtime_arrays, cand, refs, mask, tol, settings, frozenset(ref.stress))
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
        rt = RuntimeFindings()
        rt.add("protocol_violation", f"the worker's runtime report is malformed ({type(e).__name__}: {e})")
        return rt


def _finish(result: EvalResult, rt: RuntimeFindings, run: CandidateRun, timed: TimingFindings) -> EvalResult:
    """Add the worker's, the runtime checks' and the timing checks' warnings (after timing, which may add some)."""
    warnings = list(result.warnings)
    warnings.extend(w for w in (*run.warnings, *rt.warnings, *timed.warnings) if w not in warnings)
    return result.replace(warnings=tuple(warnings), extra={**result.extra, "runtime": rt.extra})


def attach_timing(
    result: EvalResult,
    run: CandidateRun,
    ref: RefOutputs,
    rt: RuntimeFindings,
    settings: RuntimeSettings,
    method: TimingMethod | None = None,
) -> EvalResult:
    """A correct result with the speedup as ``method`` (default :func:`method_of` the run) estimates it from the
    calls on a fresh input, both timings, and the interval where the method has one; the speedup capped by
    :func:`~musaenv.verification.runtime.checked_speedup` when a re-measurement disagrees (the interval with it)."""
    if run.timing is None:
        return result
    samples = [float(x) for x in run.timing[0].samples_ms]
    fresh: list[int] | None = None
    if run.timing_layout is not None:
        n = run.paired.pairs if run.paired is not None else len(samples)
        fresh = first_use_calls(n, *run.timing_layout)
        if len(fresh) >= 3:  # repeated inputs measure an input-keyed cache as well as the kernel: not counted
            samples = [samples[i] for i in fresh if i < len(samples)]
        else:
            fresh = None
            result = result.replace(warnings=(*result.warnings, "timing_inputs_reused"))
    est = (method or method_of(run)).estimate(samples, ref.timing, run.paired, fresh)
    if est is None:
        return result
    if est.ref is not None and est.speedup is not None:
        remeasure = _remeasure(run)
        est = est.capped(checked_speedup(est.speedup, est.ref.median_ms, est.cand.median_ms, remeasure, settings, rt))
    return result.replace(
        timing=est.cand,
        runtime_ms=est.cand.median_ms,
        ref_timing=est.ref,
        ref_runtime_ms=est.ref.median_ms if est.ref is not None else None,
        speedup=est.speedup,
        speedup_low=est.low,
        speedup_high=est.high,
        timing_pairs=est.pairs,
        extra={**result.extra, **est.extra, **({} if run.cores_awake is None else {"cores_awake": run.cores_awake})},
    )


def _remeasure(run: CandidateRun) -> list[float]:
    return list(run.runtime.timing.remeasure_ms) if run.runtime.timing is not None else []
