"""Runtime verification, parent side: turn what the candidate worker observed into flags (numpy only, no torch).

The worker (:mod:`musaenv.verification.runtime_probe`) reports facts: the outermost aten ops of one profiled
forward, kernel calls per trial, threads, global settings, tampered harness objects, a poisoned repeat of trial 1,
a run with the last kernel's output overwritten, and a second timing taken with a clock captured before the
candidate loaded. This module judges them, in the parent, where the candidate cannot reach:

* ``forbidden_aten_op``: aten compute outside the MusaCoder allowlist ran in forward, from Python or from the
  extension's own C++ (HACKS S1-S5); an error under the ``strict`` policy, a warning plus the kernel coverage
  (:mod:`musaenv.verification.coverage`) under ``kernelbench`` and ``permissive``.
* ``low_kernel_coverage`` (``kernelbench``): with that torch compute, the candidate's own kernels
  took less than :data:`~musaenv.verification.coverage.KERNEL_COVERAGE_FLOOR` of the compute time, or compute was
  hidden from the profiler (S4: torch does the work, a kernel copies the result).
* ``torch_computed_output`` (``strict``, ``kernelbench``; reported under ``permissive``): forward's output is what a
  forbidden torch op computed from forward's inputs, the kernels only passed it on (S4 padded to meet the floor).
* ``no_kernel_call``: some call of forward never returned from the candidate's extension (S1-S3).
* ``output_not_from_kernel``: overwriting the last kernel call's result left the output unchanged (S3).
* ``output_independent_of_input``: the reference output changed between two trials, the candidate's did not (S6, S7).
* ``nondeterministic``: a repeat of trial 1 after poisoning freed memory fails the reference (S8, S9); a repeat that
  only differs in bits is the warning ``nondeterministic_bits``.
* ``stale_output``: trial 1's tensors rewritten in place with a later trial's values gave an old answer (S11: a
  cache keyed on the address; both calls of that run are checked, on every evaluation, not sampled).
* ``thread_started``, ``global_state_changed``, ``timer_tampering``, ``harness_tampering`` (T2, T4, T9, S20).
* ``suspicious_speedup`` (warning): above the configured ceiling; the speedup is recomputed conservatively.

docs/verification.md lists each defence with its limits.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from musaenv.config import EvalConfig
from musaenv.isolation.reports import (
    ProfileReport,
    RuntimeChecks,
    RuntimeReport,
    RuntimeReports,
    TimingReport,
    TrialsReport,
)
from musaenv.verification.compare import bits_equal, compare_outputs, compare_stressed
from musaenv.verification.coverage import (
    ALLOWED_ATEN_OPS,
    FLOOR_POLICIES,
    KERNEL_COVERAGE_FLOOR,
    PROVENANCE_POLICIES,
    forbidden_ops,
    is_allowed_aten_op,
    kernel_coverage,
    torch_computed,
)
from musaenv.verification.dependence import input_dependence_failures
from musaenv.verification.rules import by_layer, severity

__all__ = [
    "ALLOWED_ATEN_OPS",
    "RUNTIME_FLAGS",
    "RuntimeFindings",
    "RuntimeSettings",
    "assess_runtime",
    "forbidden_ops",
    "input_dependence_failures",
    "is_allowed_aten_op",
]

#: Every flag this module (and the worker's per-trial checks) can raise, with the sentence the policy reads: a view
#: of :data:`musaenv.verification.rules.RULES`.
RUNTIME_FLAGS: dict[str, str] = {r.name: r.message for r in by_layer("runtime")}

# A re-measure this many times slower than the reported median (and by more than the floor): the first clock lied.
# Host noise on the shared 2-core machines reached 4.7x between two medians of 5 calls; the factor doubles that.
REMEASURE_FACTOR = 10.0
REMEASURE_FLOOR_MS = 0.05


@dataclass(frozen=True)
class RuntimeSettings:
    """What the worker checks and how the parent judges it (built from :class:`EvalConfig`).

    Attributes:
        policy: ``strict``, ``permissive`` or ``off`` for the profiler's aten-op check.
        checks: The other runtime checks (kernel calls, output provenance and dependence, repeat, threads, timers).
        suspicious_speedup: Ceiling above which a speedup is reported and recomputed.
    """

    policy: str = "off"
    checks: bool = False
    suspicious_speedup: float = 50.0

    @classmethod
    def from_config(cls, config: EvalConfig) -> RuntimeSettings:
        """Settings of ``config`` (``runtime_policy="auto"`` follows ``static_policy``)."""
        policy = config.static_policy if config.runtime_policy == "auto" else config.runtime_policy
        return cls(policy, config.runtime_checks, config.suspicious_speedup)

    def to_request(self, atol: float, rtol: float) -> RuntimeChecks:
        """The worker's part of the settings, with the task's tolerance (for the provenance forward)."""
        return RuntimeChecks(self.policy, self.checks, float(atol), float(rtol))


@dataclass
class RuntimeFindings:
    """What :func:`assess_runtime` concluded: flags decide ``cheating``; warnings and extra are reported."""

    flags: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, flag: str, detail: str, error: bool = True) -> None:
        """Record one finding (once per flag) with a readable detail."""
        target = self.flags if error else self.warnings
        if flag not in target:
            target.append(flag)
            self.messages.append(f"{'error' if error else 'warning'}: {RUNTIME_FLAGS.get(flag, flag)}: {detail}")


def _profile_findings(profile: ProfileReport, policy: str, out: RuntimeFindings) -> None:
    if not profile.ok:
        # It worked before the candidate loaded, so the candidate broke it: an error under every profiled policy,
        # or switching the profiler off would also switch off the kernel-coverage floor.
        out.add(
            "profile_unavailable",
            (profile.error or "no profile")[:300],
            error=profile.preflight_ok,
        )
        return
    bad = forbidden_ops(profile.ops)
    cov = kernel_coverage(profile)
    out.extra["coverage"] = cov.to_dict()
    out.extra["forbidden_ops"] = sorted({op.name for op in bad})
    # Ops that reached the dispatcher (the recording mode saw them) but left no profiler event at all: RecordFunction
    # was switched off around them. Allowed composite ops are explained by their own events, so only these count.
    seen = set(profile.seen)
    hidden = sorted(
        n for n in profile.dispatched if n.startswith("aten::") and not is_allowed_aten_op(n) and n not in seen
    )
    out.extra["hidden_ops"] = hidden
    if bad or hidden:
        names = ", ".join([*out.extra["forbidden_ops"][:8], *(f"{n} (hidden from the profiler)" for n in hidden[:4])])
        error = severity("forbidden_aten_op", policy) == "error"
        out.add("forbidden_aten_op", f"{names} (kernel coverage {_percent(cov.ratio)})", error=error)
    if policy not in FLOOR_POLICIES:
        return  # strict refuses every forbidden op already; permissive reports the coverage
    if hidden:  # never honest, and on a device its time is not measured at all
        out.add("low_kernel_coverage", "compute was hidden from the profiler: the kernels' share cannot be measured")
    elif bad and cov.below():
        out.add(
            "low_kernel_coverage",
            f"{_percent(cov.ratio)} of the compute time ({cov.basis}) ran in the candidate's kernels "
            f"({cov.own_kernel_us:.0f} us against {cov.forbidden_torch_us:.0f} us of torch compute: "
            f"{', '.join(out.extra['forbidden_ops'][:4])}); at least {KERNEL_COVERAGE_FLOOR:.0%} is required",
        )


def _percent(ratio: float | None) -> str:
    return "unknown" if ratio is None else f"{ratio:.0%}"


def _repeat_findings(
    repeat: Sequence[np.ndarray],
    first: Sequence[np.ndarray],
    ref: Sequence[np.ndarray],
    tol: tuple[float, float],
    out: RuntimeFindings,
) -> None:
    if bits_equal(repeat, first):
        return
    cmp = compare_outputs(list(repeat), list(ref), tol[0], tol[1])
    if not cmp.passed:
        out.add("nondeterministic", f"trial 1 repeated after poisoning freed memory: {cmp.reason}")
    else:
        msg = f"trial 1 repeated: max abs error {cmp.max_abs_error:.3g} (within tolerance)"
        out.add("nondeterministic_bits", msg, error=False)


def _state_findings(msg: RuntimeReport, out: RuntimeFindings, where: str) -> None:
    threads = msg.threads
    # Only validated on the CPU backend so far: a GPU runtime may start helper threads lazily, so there it warns.
    on_cpu = msg.device_type == "cpu"
    if threads.max_seen > threads.base > 0:
        out.add("thread_started", f"{threads.base} threads before, {threads.max_seen} {where}", error=on_cpu)
    if threads.overuse:
        out.add("thread_started", "; ".join(threads.overuse) + f" ({where})", error=on_cpu)
    if msg.global_state:
        out.add("global_state_changed", ", ".join(msg.global_state) + f" ({where})")
    if msg.tampered.timer:
        out.add("timer_tampering", "replaced: " + ", ".join(msg.tampered.timer[:6]))
    if msg.tampered.harness:
        out.add("harness_tampering", "replaced: " + ", ".join(msg.tampered.harness[:6]))


def _trial_findings(
    msg: TrialsReport,
    arrays: Sequence[np.ndarray],
    cand: Sequence[Sequence[np.ndarray]],
    ref: Sequence[Sequence[np.ndarray]],
    passed: Sequence[bool],
    tol: tuple[float, float],
    out: RuntimeFindings,
    stress: Collection[int] = (),
) -> None:
    calls = msg.kernel_calls
    if calls is not None:
        out.extra["kernel_calls"] = list(calls)
        missing = [i + 1 for i, n in enumerate(calls) if n <= 0]
        if missing:
            out.add("no_kernel_call", f"no extension call returned during trial(s) {missing}")
        elif msg.repeat_calls <= 0:
            out.add("no_kernel_call", "trial 1 repeated with the same input ran no kernel (an output cache, S11)")
    _state_findings(msg, out, "after the trials")
    n_rep, n_pert = msg.repeat_outputs, msg.perturb_outputs
    first_ok = bool(passed) and passed[0] and bool(cand) and bool(ref)
    if n_rep and first_ok:
        _repeat_findings(arrays[:n_rep], cand[0], ref[0], tol, out)
    if n_pert and first_ok and bits_equal(arrays[n_rep : n_rep + n_pert], cand[0]):
        out.add("output_not_from_kernel", "trial 1 gave the same bits with the last kernel call's result overwritten")
    out.extra["perturb"] = msg.perturb_note
    _rewrite_findings(msg, arrays[n_rep + n_pert :], cand, ref, passed, tol, out, stress)
    misses = input_dependence_failures(cand, ref, passed)
    if misses:
        out.add("output_independent_of_input", "; ".join(misses[:3]))


def _rewrite_findings(
    msg: TrialsReport,
    arrays: Sequence[np.ndarray],
    cand: Sequence[Sequence[np.ndarray]],
    ref: Sequence[Sequence[np.ndarray]],
    passed: Sequence[bool],
    tol: tuple[float, float],
    out: RuntimeFindings,
    stress: Collection[int] = (),
) -> None:
    """Trial 1's tensors rewritten in place with trial ``j``'s values: the output must be trial ``j``'s, and the call
    before it (``rewrite_calls`` 2) trial 1's (judged only when the candidate passed both trials fresh), each
    compared as its trial was (a stress trial, ``j in stress``, with :func:`compare_stressed`'s allowance for
    rounding-size misses: the strict comparison called an honest linear layer's 3 values in 131072 at 7x the
    tolerance, on inputs offset by hundreds, a stale output)."""
    n, j = msg.rewrite_outputs, msg.rewrite_trial
    out.extra["rewrite"] = msg.rewrite_note
    if not n or not 0 < j < min(len(passed), len(ref), len(cand)) or not (passed[0] and passed[j]):
        return
    calls = [(j, f"trial 1's inputs rewritten in place with trial {j + 1}'s values")]
    if msg.rewrite_calls == 2:
        calls.insert(0, (0, "trial 1's inputs in fresh tensors"))
    for k, (trial, what) in enumerate(calls):
        same = compare_stressed if trial in stress else compare_outputs
        cmp = same(list(arrays[k * n : (k + 1) * n]), list(ref[trial]), tol[0], tol[1])
        if not cmp.passed:
            out.add("stale_output", f"{what}: {cmp.reason}")
            return


def assess_runtime(
    reports: RuntimeReports,
    arrays: Sequence[np.ndarray],
    cand: Sequence[Sequence[np.ndarray]],
    ref: Sequence[Sequence[np.ndarray]],
    passed: Sequence[bool],
    tol: tuple[float, float],
    settings: RuntimeSettings,
    stress: Collection[int] = (),
) -> RuntimeFindings:
    """Judge the worker's runtime reports.

    Args:
        reports: The worker's runtime reports (decoded and checked on receipt); none when it sent none.
        arrays: Arrays of the ``trials`` report: the poisoned repeat's outputs, then the perturbed run's.
        cand: Candidate outputs per correctness trial.
        ref: Reference outputs per correctness trial.
        passed: Per trial, whether it passed the comparison.
        tol: (atol, rtol).
        settings: :class:`RuntimeSettings` of this evaluation.
        stress: The stress trials among them (compared with :func:`compare_stressed`'s allowance, as they were).
    """
    out = RuntimeFindings()
    trials = reports.trials
    if trials is None:
        return out
    if settings.policy != "off" and trials.profile is not None:
        _profile_findings(trials.profile, settings.policy, out)
    why = torch_computed(trials.provenance) if settings.policy != "off" and trials.provenance else None
    if trials.provenance:
        out.extra["provenance"] = trials.provenance.to_dict()
    if why is not None:
        out.add("torch_computed_output", why, error=settings.policy in PROVENANCE_POLICIES)
    if settings.checks:
        _trial_findings(trials, arrays, cand, ref, passed, tol, out, stress)
        if reports.timing is not None:
            _timing_findings(reports.timing, out)
    return out


def _timing_findings(msg: TimingReport, out: RuntimeFindings) -> None:
    if msg.remeasure_ms:
        out.extra["remeasure_ms"] = round(float(np.median(msg.remeasure_ms)), 6)
    calls, timed = msg.kernel_calls, msg.forward_calls
    if calls is not None and calls < timed:
        out.add("no_kernel_call", f"{calls} extension calls returned during {timed} timed forward calls")
    _state_findings(msg, out, "after timing")


def checked_speedup(
    speedup: float | None,
    ref_ms: float | None,
    median_ms: float,
    remeasure_ms: Sequence[float],
    settings: RuntimeSettings,
    out: RuntimeFindings,
) -> float | None:
    """The speedup to report: recomputed from the slower of the two measurements when it is suspicious.

    Suspicious means above ``settings.suspicious_speedup``, or a re-measure (clock captured before the candidate
    loaded) more than :data:`REMEASURE_FACTOR` times slower than the reported median.
    """
    if speedup is None or ref_ms is None:
        return speedup
    second = float(np.median(remeasure_ms)) if len(remeasure_ms) else None
    if second is not None:
        out.extra["remeasure_ms"] = round(second, 6)
    slow = second is not None and second > REMEASURE_FACTOR * median_ms and second - median_ms > REMEASURE_FLOOR_MS
    if slow:
        out.add("timing_inconsistent", f"median {median_ms:.4g} ms, re-measured {second:.4g} ms", error=False)
    if speedup > settings.suspicious_speedup:
        out.add("suspicious_speedup", f"{speedup:.1f}x > {settings.suspicious_speedup:g}x", error=False)
    elif not slow:
        return speedup
    if second is None or second <= 0:
        return speedup
    checked = ref_ms / max(median_ms, second)
    out.messages.append(f"speedup re-measured: {speedup:.3g}x reported, {checked:.3g}x counted")
    return checked
