"""Turn a candidate run and reference outputs into an :class:`EvalResult` (no torch)."""

from __future__ import annotations

from collections.abc import Sequence

from musaenv.evaluator.candidate import CandidateRun
from musaenv.evaluator.reference import RefOutputs
from musaenv.types import EvalResult, Stage, TimingStats
from musaenv.verification.compare import compare_outputs, trivial_output_passes

__all__ = ["judge"]

# Flags the worker raises on outputs and inputs, with the sentence the policy reads.
WORKER_FLAGS = {
    "output_not_tensor": "the output is not a plain torch.Tensor (subclass or other object) (HACKS T3)",
    "output_not_dense": "the output is not a dense strided tensor",
    "output_aliases_input": "the output shares memory with an input; return a new tensor",
    "input_mutation": "forward modified its input tensors",
    "timed_output_mismatch": "outputs produced while timing differ from the reference (caching or replay?)",
}


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def _compare_trials(
    run: CandidateRun, ref: RefOutputs, atol: float, rtol: float
) -> tuple[int, float | None, float | None, list[str], list[str]]:
    passed, worst_abs, worst_rel = 0, None, None
    messages: list[str] = []
    flags: list[str] = []
    for i, ((arrays, dtypes, tflags), (rarr, rdt)) in enumerate(zip(run.trials, ref.trials)):
        flags.extend(f for f in tflags if f not in flags)
        cmp = compare_outputs(arrays, rarr, atol, rtol, dtypes, rdt)
        if cmp.max_abs_error is not None:
            worst_abs = max(worst_abs or 0.0, cmp.max_abs_error)
            worst_rel = max(worst_rel or 0.0, cmp.max_rel_error or 0.0)
        if cmp.passed and not tflags:
            passed += 1
        elif cmp.reason and len(messages) < 3:
            messages.append(f"trial {i + 1}: {cmp.reason}")
    return passed, worst_abs, worst_rel, messages, flags


def _recheck(run: CandidateRun, ref: RefOutputs, atol: float, rtol: float) -> bool:
    """True when the kept timed outputs match the reference for the same inputs."""
    if run.timing is None or not ref.rechecks:
        return True
    msg, arrays = run.timing
    counts = [int(c) for c in msg.get("kept_counts", [])]
    pos = 0
    for (rarr, _), n in zip(ref.rechecks, counts):
        if not compare_outputs(arrays[pos : pos + n], rarr, atol, rtol).passed:
            return False
        pos += n
    return len(counts) == len(ref.rechecks)


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
) -> EvalResult:
    """Assemble the verdict of a candidate run (``ref`` is ``None`` when the candidate never produced outputs)."""
    base = EvalResult(
        stage=Stage.INFRA_ERROR,
        task_id=task_id,
        backend=backend,
        device=device,
        compile_time_s=run.compile_time_s,
        warnings=tuple(static_warnings),
        build_cached=all(b.get("cached") for b in run.builds) if run.builds else None,
        compiler_log=_truncate(run.compile_log, log_chars),
        extra={"builds": run.builds, "sandbox": run.sandbox},
    )
    if run.infra_log:
        return base.replace(stage=Stage.INFRA_ERROR, messages=("the build service failed (not the candidate)",),
                            runtime_log=_truncate(run.infra_log, log_chars))
    if run.failure is not None:
        stage, text = run.failure
        is_compile = stage == "compile_error"
        return base.replace(
            stage=Stage(stage),
            flags=tuple(run.flags),
            device=None if is_compile else device,
            compiler_log=_truncate(text if is_compile else run.compile_log, log_chars),
            runtime_log="" if is_compile else _truncate(text, log_chars),
        )
    if run.compile_only:
        return base.replace(
            stage=Stage.COMPILED,
            device=None,
            messages=(f"compiled for {backend}; no {backend} device here, so correctness and timing were not run",),
        )
    assert ref is not None
    passed, worst_abs, worst_rel, messages, flags = _compare_trials(run, ref, atol, rtol)
    if ref.trials and all(trivial_output_passes(r, atol, rtol) for r, _ in ref.trials):
        base = base.replace(warnings=(*base.warnings, "degenerate_task_zeros_pass"))
    result = base.replace(
        trials_passed=passed,
        trials_total=len(ref.trials),
        max_abs_error=worst_abs,
        max_rel_error=worst_rel,
        warnings=(*base.warnings, *run.warnings),
    )
    if passed == len(ref.trials) and not _recheck(run, ref, atol, rtol):
        flags.append("timed_output_mismatch")
    if flags:
        notes = tuple(WORKER_FLAGS.get(f, f) for f in flags)
        return result.replace(stage=Stage.CHEATING, flags=tuple(flags), messages=notes + tuple(messages))
    if passed < len(ref.trials):
        return result.replace(stage=Stage.INCORRECT, messages=tuple(messages))
    return _with_timing(result.replace(stage=Stage.CORRECT), run, ref)


def _with_timing(result: EvalResult, run: CandidateRun, ref: RefOutputs) -> EvalResult:
    if run.timing is None:
        return result
    stats = TimingStats.from_samples([float(x) for x in run.timing[0]["samples_ms"]])
    speedup = None
    if ref.timing is not None and stats.median_ms > 0:
        speedup = ref.timing.median_ms / stats.median_ms
    return result.replace(
        timing=stats,
        runtime_ms=stats.median_ms,
        ref_timing=ref.timing,
        ref_runtime_ms=ref.timing.median_ms if ref.timing else None,
        speedup=speedup,
    )
