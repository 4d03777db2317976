"""The rule table: one :class:`Rule` per flag a verdict can carry, the one place a flag is defined.

A rule names the flag, the hack classes it defends against (:data:`~musaenv.verification.hack_classes.HACK_CLASSES`,
from HACKS.md), the layers that raise it, its severity under each policy, the sentence the feedback prints, and the
hostile candidates (``tests/adversarial/candidates*/<stem>.py``) that trip it, or why none does. The tables the
checks read (``FLAG_DESCRIPTIONS``, ``RUNTIME_FLAGS``, ``WORKER_FLAGS``, ``POLICY_FLAGS``...) are views of it;
``tests/unit/verification/test_rules.py`` checks that every flag the package emits has a rule. docs/hacks.md is
generated from it: ``python -m musaenv.verification.rules_doc > docs/hacks.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "LAYERS",
    "RULES",
    "SEVERITIES",
    "Rule",
    "Severity",
    "by_layer",
    "get_rule",
    "message",
    "policies_where",
    "severity",
]

#: Where a flag is raised: the candidate's source (static), the built module's imports (binary), the worker's
#: per-call checks (worker), the parent's judgement of the worker's runtime reports (runtime), timing (timing), the
#: worker's message protocol (protocol), the build (build), or the harness and the task (infra).
LAYERS = ("static", "binary", "build", "worker", "runtime", "timing", "protocol", "infra")
#: What a flag is under a policy: ``error`` decides the verdict (``cheating``, or ``format_error`` for a malformed
#: candidate), ``warning`` is reported only, ``unscored`` marks a verdict that is not the candidate's (infra_error,
#: compiled), ``None`` is not raised.
SEVERITIES = ("error", "warning", "unscored", None)


class Severity(NamedTuple):
    """A flag's severity under each policy (``static_policy``; ``runtime_policy="auto"`` follows it)."""

    strict: str | None
    kernelbench: str | None
    permissive: str | None
    off: str | None

    def under(self, policy: str) -> str | None:
        """The severity under ``policy`` (``None``: not raised)."""
        return getattr(self, policy) if policy in self._fields else None


ALWAYS = Severity("error", "error", "error", "error")
#: Library compute: refused by strict, reported by the lenient policies, not looked for under off.
LIBRARY = Severity("error", "warning", "warning", None)
#: The kernel contract (a custom kernel does the work): refused except under off.
CONTRACT = Severity("error", "error", "error", None)
WARN = Severity("warning", "warning", "warning", "warning")
UNSCORED = Severity("unscored", "unscored", "unscored", "unscored")


@dataclass(frozen=True)
class Rule:
    """One flag.

    Attributes:
        name: The flag, as ``EvalResult.flags``/``warnings`` and findings carry it.
        hacks: HACKS.md classes it defends against (empty: not a cheat, e.g. a malformed candidate or the harness).
        layers: Where it is raised (:data:`LAYERS`), the first being where it is mostly raised.
        severity: Per policy (:class:`Severity`).
        message: The sentence the feedback prints for it (verbatim where a check prints it today).
        candidates: Stems of hostile candidates under ``tests/adversarial/candidates*/`` that trip it.
        no_candidate: Why no candidate trips it (required when ``candidates`` is empty).
        note: Where the severity depends on more than the policy.
    """

    name: str
    hacks: tuple[str, ...]
    layers: tuple[str, ...]
    severity: Severity
    message: str
    candidates: tuple[str, ...] = ()
    no_candidate: str = ""
    note: str = ""


def _r(name: str, hacks: str, layers: str, sev: Severity, message: str, cands: str = "", **kw: str) -> Rule:
    return Rule(name, tuple(hacks.split()), tuple(layers.split()), sev, message, tuple(cands.split()), **kw)


_UNIT = "no hostile candidate yet; unit tests only ({})"
_NOT_CHEAT = "not a cheat: {}"

RULES: tuple[Rule, ...] = (
    # --- static: the candidate's source ---------------------------------------------------------------------------
    _r("syntax_error", "", "static", ALWAYS, "the candidate is not valid Python",
       no_candidate=_NOT_CHEAT.format("a malformed response ends as format_error (test_static_python.py)")),
    _r("missing_model_new", "", "static", ALWAYS, "no class ModelNew is defined",
       no_candidate=_NOT_CHEAT.format("a malformed response ends as format_error (test_static_python.py)")),
    _r("forbidden_torch_op", "S1 S4", "static", LIBRARY, "torch/aten compute reachable from ModelNew.forward",
       "s01_torch_op s02_try_except s03_decoy_torch s04_partial s04_softmax_copy"),
    _r("no_custom_kernel", "S1 S3", "static", CONTRACT, "forward never reaches a custom kernel",
       "s01_torch_op t03_lazy_object", note="a warning where the analysis cannot tell whether a kernel runs"),
    _r("try_except_fallback", "S2", "static", CONTRACT, "an exception handler falls back to torch", "s02_try_except",
       note="kernelbench refuses every try/except, strict and permissive only those reaching torch compute"),
    _r("reference_model", "S1", "static", CONTRACT, "the reference Model is used, subclassed or patched",
       "s01_subclass_model"),
    _r("library_compute", "S5", "static binary", LIBRARY, "ATen/torch compute inside the C++/CUDA source",
       "s05_aten_in_cpp s05_method_in_cpp s05_adl_in_cpp s05_cpu_direct b03_ops_alias_thread",
       note="a warning for names that are also C math functions (ambiguous under using namespace at)"),
    _r("vendor_library", "S5", "static binary", LIBRARY,
       "cuBLAS/cuDNN/muBLAS/muDNN/CUTLASS/Thrust/MKL-style library compute",
       no_candidate=_UNIT.format("test_static_cpp.py, test_static_cupy.py, test_binary_imports.py")),
    _r("unresolved_source", "S23", "static", ALWAYS, "an extension source that cannot be read statically",
       no_candidate=_UNIT.format("test_static_cpp.py, test_static_cupy.py, test_static_safety.py")),
    _r("computed_include", "S23", "static", ALWAYS, "an #include whose header is computed by a macro",
       no_candidate=_UNIT.format("test_static_cpp.py")),
    _r("dynamic_code", "S23", "static binary", ALWAYS,
       "exec/eval/importlib/ctypes/pickle/base64 or dynamic attribute access",
       "s23_exec_base64 s20_patch_harness s21_gc_reference b05_dlsym_lookup"),
    _r("process_or_thread", "T2", "static", ALWAYS, "threads, processes or signals from Python",
       "t02_python_thread h_subprocess h_fork_storm"),
    _r("thread_or_process", "T2", "static binary", ALWAYS, "threads or processes from C++", "t02_cpp_thread"),
    _r("memory_or_signal", "B6", "binary", ALWAYS,
       "page protections, memory mappings or signal handlers from C++ (a built module's imports)",
       no_candidate=_UNIT.format("test_binary_imports.py")),
    _r("network", "S14", "static binary", ALWAYS, "network access", "h_network"),
    _r("monkeypatch", "S20 T4", "static binary", ALWAYS, "patching torch, the harness or any imported module",
       "s20_patch_allclose t04_patch_timer_py b04_redispatch"),
    _r("profiler_tampering", "S20", "static binary", ALWAYS,
       "switching off the recording of ATen calls that the runtime checks rely on", "s05_no_record s05_adl_unrecorded"),
    _r("introspection", "S21 S22", "static binary", ALWAYS, "frames, globals, gc, inspect, environment or argv",
       "s21_gc_reference s22_detect_timing"),
    _r("file_access", "S14", "static binary", ALWAYS, "reading or writing files",
       "s14_file_replay s14_cache_poison t06_stdout_claims b07_filebuf_file_read"),
    _r("harness_access", "S20", "static", ALWAYS, "importing the evaluation harness",
       no_candidate=_UNIT.format("test_static_safety.py")),
    _r("side_stream", "T1 T12", "static", ALWAYS, "work on another stream, or timing events",
       no_candidate=_UNIT.format("test_static_cpp.py, test_static_cupy.py, test_static_safety.py; "
                                 "tests/gpu/test_cuda_gpu.py on a GPU")),
    _r("graph_replay", "T8", "static binary", ALWAYS, "torch.compile, TorchScript, FX or CUDA graph replay",
       no_candidate=_UNIT.format("test_static_cpp.py, test_static_safety.py, test_binary_imports.py")),
    _r("global_state", "S15 T7 T9", "static", ALWAYS, "process-wide RNG, thread, precision or L2 settings",
       "t09_global_threads"),
    _r("private_torch_api", "S23", "static", ALWAYS, "private torch internals (torch._*)",
       no_candidate=_UNIT.format("test_static_safety.py")),
    _r("tensor_subclass", "T3", "static", ALWAYS,
       "tensor subclasses or __torch_function__/__torch_dispatch__ overrides", "t03_tensor_subclass"),
    _r("output_cache", "S11 S12 S13", "static", ALWAYS,
       "outputs cached across calls (id(), data_ptr(), hash keys, lru_cache)",
       "s11_cache_content s11_cache_data_ptr s12_warmup_counter_py m_clone_override_py",
       note="a warning for other state kept across calls (a counter, a stored tensor)"),
    _r("banned_import", "S1 S23", "static", ALWAYS, "an import outside the allowlist",
       "s11_cache_content t06_forged_channel"),
    _r("inline_asm", "", "static", WARN, "inline assembly (not checked)",
       no_candidate=_NOT_CHEAT.format("PTX inline assembly is common in honest kernels; reported only")),
    _r("raw_syscall", "T2 S14 B7", "binary static", ALWAYS,
       "a system call instruction of the candidate's own (inline assembly, or its bytes in the built module)",
       "b06_raw_syscall_bytes"),
    _r("python_c_api", "T4 S20", "static", ALWAYS,
       "the CPython C API: reaching Python objects (timers, the harness) from C++",
       no_candidate=_UNIT.format("test_static_cpp.py; tests/adversarial/boundary_candidates.py")),
    _r("preprocessor_unavailable", "", "static", WARN, "the C preprocessor could not expand the source",
       no_candidate=_NOT_CHEAT.format("the machine's preprocessor failed; the raw text is still scanned")),
    _r("macro_redefined", "S23", "static", WARN, "a macro with several definitions",
       no_candidate=_UNIT.format("test_static_cpp.py; reported only, every definition is scanned")),
    _r("unusual_build_flag", "", "static", WARN, "an unexpected linker library",
       no_candidate=_NOT_CHEAT.format("reported only; vendor libraries are vendor_library")),
    _r("build_flag_refused", "B1", "static build", ALWAYS,
       "a compiler or linker flag outside the allow-list (docs/verification.md#build-flags)",
       no_candidate="hostile builds are tests/adversarial/boundary_candidates.py (test_build_boundary.py), "
       "not candidate files; unit tests test_static_cpp.py, test_static_cupy.py"),
    _r("backend_mismatch", "", "static", WARN, "the kernels do not match the requested backend",
       no_candidate=_NOT_CHEAT.format("reported only (test_static_python.py)")),
    _r("too_complex", "S23", "static", ALWAYS, "the candidate is nested too deeply to analyse",
       no_candidate=_UNIT.format("test_static_python.py")),
    _r("cuda_runtime_api", "T1 S20", "static", ALWAYS,
       "CuPy's CUDA runtime/driver API, devices, memory pools or module loading from Python",
       no_candidate=_UNIT.format("test_static_cupy.py; CuPy candidates need a GPU")),
    # --- worker: each call's outputs and inputs -------------------------------------------------------------------
    _r("output_not_tensor", "T3", "worker", ALWAYS,
       "the output is not a plain torch.Tensor (subclass or other object) (HACKS T3)",
       "t03_lazy_object t03_tensor_subclass"),
    _r("output_not_dense", "T3", "worker", ALWAYS, "the output is not a dense strided tensor",
       no_candidate=_UNIT.format("tests/unit/worker/test_candidate.py")),
    _r("output_aliases_input", "S10", "worker", ALWAYS, "the output shares memory with an input; return a new tensor",
       "s10_inplace_alias"),
    _r("input_mutation", "S10", "worker", ALWAYS, "forward modified its input tensors", "s10_zero_inputs"),
    _r("thread_count_grew", "T2", "worker", WARN, "the worker had more threads after the candidate ran",
       no_candidate="raised only with runtime checks off (thread_started judges it otherwise); the suite runs "
       "with them on"),
    # --- runtime: the parent's judgement of the worker's runtime reports ------------------------------------------
    _r("forbidden_aten_op", "S1 S2 S3 S4 S5", "runtime", LIBRARY,
       "aten compute outside the tensor-plumbing allowlist ran during forward (S1-S5)",
       "s01_torch_op s01_subclass_model s02_try_except s03_decoy_torch s04_partial s05_aten_in_cpp s21_gc_reference"),
    _r("low_kernel_coverage", "S4", "runtime", Severity(None, "error", None, None),
       "torch compute ran in forward and the candidate's own kernels took less than the required "
       "share of the compute time (S4)", "s04_softmax_copy"),
    _r("torch_computed_output", "S4", "runtime", Severity("error", "error", "warning", None),
       "forward's output is what a torch op computed from forward's inputs; the candidate's "
       "kernels only passed it on (S4)", "s04_softmax_copy s04_softmax_padded_copy"),
    _r("no_kernel_call", "S1 S2 S3 S11", "runtime", ALWAYS,
       "a call of forward did not run the candidate's compiled kernel (S1-S3)", "s11_cache_content s11_cache_shape"),
    _r("output_not_from_kernel", "S3", "runtime", ALWAYS,
       "the output did not change when the last kernel's result was overwritten (S3 decoy)",
       "s03_decoy_numpy s08_stale_memory"),
    _r("output_independent_of_input", "S6 S7", "runtime", ALWAYS,
       "the output did not follow the input where the reference did (S6, S7)",
       "s06_zeros_tiny s06_constant_tiny s06_scaled_input_tiny"),
    _r("nondeterministic", "S8 S9", "runtime", ALWAYS,
       "a repeat of the same input after poisoning freed memory failed the reference (S8, S9)",
       "s08_stale_memory s09_uninitialised_read"),
    _r("nondeterministic_bits", "S9", "runtime", WARN,
       "a repeat of the same input gave different bits, within tolerance",
       no_candidate=_NOT_CHEAT.format("honest parallel reductions differ in bits; reported only "
                                      "(test_runtime_rules.py)")),
    _r("stale_output", "S11 S9", "runtime", ALWAYS,
       "new values written into the same input tensors gave the old values' answer (S11 cache by address, "
       "S9 unwritten output)", "s11_cache_data_ptr s11_cache_cpp_address s09_uninitialised_read"),
    _r("thread_started", "T2", "runtime", ALWAYS,
       "forward started threads (T2) or more threads than the configured intra-op pool",
       "t02_cpp_thread t02_python_thread", note="a warning off the CPU backend (a GPU runtime starts helper threads)"),
    _r("global_state_changed", "T9 S17", "runtime", ALWAYS,
       "threads, precision or default settings were changed (T9, S17)", "t09_global_threads"),
    _r("timer_tampering", "T4", "runtime", ALWAYS, "the timing clock or its helpers were replaced (T4)",
       "t04_patch_timer_py t04_patch_timer_cpp"),
    _r("harness_tampering", "S20", "runtime", ALWAYS, "functions of the evaluation harness were replaced (S20)",
       "s20_patch_allclose s20_patch_harness m_clone_override_py"),
    _r("profile_unavailable", "S20", "runtime", CONTRACT, "the profiler could not observe forward",
       no_candidate=_UNIT.format("test_kernel_coverage.py"),
       note="a warning when the profiler already failed before the candidate loaded (not the candidate's doing)"),
    _r("suspicious_speedup", "T4 T11", "runtime", WARN,
       "the speedup exceeds the configured ceiling; it was re-measured",
       no_candidate=_NOT_CHEAT.format("a ceiling on any speedup, reported and re-measured (test_runtime_rules.py)")),
    _r("timing_inconsistent", "T4 B6", "runtime", WARN,
       "a second timing with an untouchable clock was much slower than the first",
       no_candidate=_UNIT.format("test_runtime_rules.py; the clock cheats end as timing_forged")),
    # --- timing and the protocol ----------------------------------------------------------------------------------
    _r("timed_output_mismatch", "S11 S12 S13 S22", "timing", ALWAYS,
       "outputs produced while timing differ from the reference (caching or replay?)",
       "s12_warmup_counter_cpp s12_warmup_counter_py s12_late_counter_cpp s12_middle_window_py s22_detect_timing"),
    _r("cpu_overuse", "T2 B6", "timing", ALWAYS,
       "while timed, the worker used more CPU cores than the reference's budget (measured from outside "
       "its process: threads that run only during timing?)",
       no_candidate=_UNIT.format("test_verdict_measurement.py; test_build_boundary.py checks the pinning"),
       note="CPU backend only (on a GPU the host threads are not timed)"),
    _r("timing_forged", "T4 B6", "timing", ALWAYS,
       "the timed calls the candidate's process reported are far shorter than the parent's own clock "
       "saw around them (a rewritten clock or samples)", "m_clock_slot_cpp m_gate_report_py"),
    _r("timing_work_outside", "S13 B6", "timing", WARN,
       "between its timed calls the candidate's process used more CPU than the reference's "
       "by more than a whole call (work moved before the clock starts)",
       no_candidate=_UNIT.format("test_verdict_measurement.py; a warning until calibrated")),
    _r("timing_inputs_reused", "B8", "timing", WARN,
       "fewer than three timed calls had an input of their own, so every call was timed",
       no_candidate=_NOT_CHEAT.format("the harness's timing layout (test_verdict_measurement.py)")),
    _r("protocol_violation", "T6", "protocol", ALWAYS, "the worker's messages broke the protocol",
       "t06_forged_channel"),
    # --- the harness, the task and the machine --------------------------------------------------------------------
    _r("degenerate_task_zeros_pass", "S6", "infra", WARN, "all-zero outputs would pass this task's tolerance",
       no_candidate=_NOT_CHEAT.format("a property of the task's outputs, reported on every candidate")),
    _r("needs_gpu", "", "infra", UNSCORED, "the candidate reached what only a GPU runs (not scored)",
       no_candidate=_NOT_CHEAT.format("a Triton candidate on the CPU interpreter (tests/integration)")),
    _r("not_built", "", "infra", UNSCORED,
       "compile-only: the candidate built no extension, so nothing was compiled or checked",
       no_candidate=_NOT_CHEAT.format("compile-only runs (test_verdict.py)")),
    _r("task_inputs", "", "infra", UNSCORED,
       "the task's reference program failed to draw its inputs (a problem of the task)",
       no_candidate=_NOT_CHEAT.format("a broken task (test_verdict.py)")),
    _r("usage_error", "", "infra", UNSCORED, "the evaluator was called wrongly (a harness or usage problem)",
       no_candidate=_NOT_CHEAT.format("the caller's mistake")),
    _r("baseline_eager_fallback", "", "infra", WARN, "the compiled baseline failed; the speedup is against eager",
       no_candidate=_NOT_CHEAT.format("the baseline's build (tests/integration/test_env_cpu.py)")),
    _r("triton_aot_inconclusive", "", "infra", WARN, "the GPU compile check of a Triton kernel was inconclusive",
       no_candidate=_NOT_CHEAT.format("the machine could not finish the check")),
)  # fmt: skip

_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}


def get_rule(flag: str) -> Rule | None:
    """The rule of ``flag``, ``None`` for a name that is not a flag."""
    return _BY_NAME.get(flag)


def message(flag: str) -> str:
    """The sentence the feedback prints for ``flag``.

    Raises:
        KeyError: ``flag`` has no rule.
    """
    return _BY_NAME[flag].message


def severity(flag: str, policy: str) -> str | None:
    """What ``flag`` is under ``policy``; a flag without a rule is an error (a check refuses what it names)."""
    rule = _BY_NAME.get(flag)
    return "error" if rule is None else rule.severity.under(policy)


def policies_where(flag: str, *levels: str) -> tuple[str, ...]:
    """The policies under which ``flag`` is raised at one of ``levels``, in :class:`Severity` order."""
    return tuple(p for p in Severity._fields if severity(flag, p) in levels)


def by_layer(*layers: str) -> tuple[Rule, ...]:
    """The rules first raised in one of ``layers`` (a rule's first layer is where it is mostly raised)."""
    return tuple(r for r in RULES if r.layers[0] in layers)
