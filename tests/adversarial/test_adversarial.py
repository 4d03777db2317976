"""Hostile candidates against every defence: none may earn a positive score, and none may get out of its sandbox.

Two evaluators share one build cache:

* ``runtime``: no static checks at all (``static_policy="off"`` still keeps the safety bans, so this evaluator
  replaces its static stage by nothing), runtime policy ``strict``. Proves what the sandbox and the worker-side
  defences catch on their own (each case names the flag or stage it must end in).
* ``full``: the defaults (static checks and runtime checks). Every candidate must score <= 0 under it.

After every hostile evaluation nothing the candidate started may still run, no file may appear outside its private
directory or in the build cache, and no connection may reach a port the test listens on.
Candidates run on a small copy of ``l1_relu`` (64x4096 and 7x1001: the second is not a multiple of a block) or on
``data/tiny_relu.py``, whose true outputs are below the fp32 tolerance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from musaenv import _env
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.rewards import candidate_score
from musaenv.tasks.builtin import get_task
from musaenv.tasks.task import Task, load_task_file
from musaenv.types import EvalResult, Stage
from musaenv.verification.coverage import KERNEL_COVERAGE_FLOOR
from tests.adversarial.containment import Traps, become_subreaper, stray_processes, traps
from tests.adversarial.hostile_kernels import CANDIDATES_DIR, DATA_DIR, render

pytestmark = pytest.mark.slow


class RuntimeOnlyEvaluator(LocalEvaluator):
    """A LocalEvaluator whose static stage lets everything through (the stage is not under test here)."""

    def _static(self, code: str) -> tuple[str, ...]:
        return ()

    def _binary_policy(self) -> str | None:
        return None  # the static layer's verdict on the built module is not under test here either


class BinaryOnlyEvaluator(RuntimeOnlyEvaluator):
    """Static source checks off, the built module judged by its imports under the strict policy: what decides is
    the binary check alone (musaenv.verification.binary_imports), before the module is loaded."""

    def _binary_policy(self) -> str | None:
        return "strict"


TIMING = TimingConfig(warmup=1, repeats=5, max_time_s=1.0)
RUNTIME_ONLY = EvalConfig(static_policy="off", runtime_policy="strict", run_timeout_s=10.0, timing=TIMING)
FULL = EvalConfig(run_timeout_s=10.0, timing=TIMING)

# candidate -> (task, outcomes of which at least one must be the stage or among the flags in the runtime-only run)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "s01_torch_op": ("relu", ("forbidden_aten_op",)),
    "s01_subclass_model": ("relu", ("forbidden_aten_op",)),
    "s02_try_except": ("relu", ("forbidden_aten_op",)),
    "s03_decoy_torch": ("relu", ("forbidden_aten_op",)),
    "s03_decoy_numpy": ("relu", ("output_not_from_kernel",)),
    "s04_partial": ("relu", ("forbidden_aten_op",)),
    "s04_softmax_copy": ("softmax", ("forbidden_aten_op",)),
    "s04_softmax_padded_copy": ("softmax", ("forbidden_aten_op",)),
    "s05_aten_in_cpp": ("relu", ("forbidden_aten_op",)),
    "s05_method_in_cpp": ("relu", ("forbidden_aten_op",)),
    "s05_adl_in_cpp": ("relu", ("forbidden_aten_op",)),
    "s05_no_record": ("relu", ("forbidden_aten_op",)),
    "s05_adl_unrecorded": ("relu", ("forbidden_aten_op",)),
    "s06_zeros_tiny": ("tiny", ("output_independent_of_input",)),
    "s06_constant_tiny": ("tiny", ("output_independent_of_input",)),
    "s06_scaled_input_tiny": ("tiny", ("output_independent_of_input",)),
    # A wrong copy: incorrect. Its short calls were once taken for forged ones (timing_forged, 2 of 3 whole runs):
    # the parent read the worker's CPU clock while the worker still ran, when the kernel's sum lags by up to a tick
    # (cpu_watch.ProcessCpuClock now waits for it to stop; tests/unit/evaluator/test_cpu_clock.py).
    "s07_identity": ("relu", ("incorrect",)),
    "s08_stale_memory": ("relu", ("incorrect", "output_not_from_kernel", "nondeterministic")),
    # the rewrite run's fresh output often lands on the previous call's block: the unwritten half keeps its answer
    "s09_uninitialised_read": ("relu", ("nondeterministic", "incorrect", "stale_output")),
    "s10_inplace_alias": ("relu", ("output_aliases_input",)),
    "s10_zero_inputs": ("relu", ("input_mutation",)),
    "s11_cache_shape": ("relu", ("incorrect", "no_kernel_call")),
    "s11_cache_content": ("relu", ("no_kernel_call",)),
    "s12_warmup_counter_cpp": ("relu", ("timed_output_mismatch",)),
    "s12_warmup_counter_py": ("relu", ("timed_output_mismatch",)),
    "s12_late_counter_cpp": ("relu", ("timed_output_mismatch",)),
    "s12_middle_window_py": ("relu", ("timed_output_mismatch",)),
    "s14_file_replay": ("relu", ("runtime_error",)),
    "s14_cache_poison": ("relu", ("runtime_error",)),
    "s16_hardcoded_shape": ("relu", ("incorrect",)),
    "s17_half_precision": ("relu", ("incorrect",)),
    "s20_patch_allclose": ("relu", ("harness_tampering",)),
    "s20_patch_harness": ("relu", ("harness_tampering",)),
    "s21_gc_reference": ("relu", ("forbidden_aten_op",)),
    "s21_nan_wildcard": ("relu", ("incorrect",)),
    "s22_detect_timing": ("relu", ("timed_output_mismatch",)),
    "s23_exec_base64": ("relu", ("forbidden_aten_op",)),
    "t02_cpp_thread": ("relu", ("thread_started",)),
    "t02_python_thread": ("relu", ("thread_started",)),
    "t03_tensor_subclass": ("relu", ("output_not_tensor", "runtime_error")),  # torch 2.4: as_subclass raises
    "t03_lazy_object": ("relu", ("output_not_tensor",)),
    "t04_patch_timer_py": ("relu", ("timer_tampering",)),
    "t04_patch_timer_cpp": ("relu", ("timer_tampering",)),
    "t06_stdout_claims": ("relu", ("incorrect",)),
    "t06_forged_channel": ("relu", ("incorrect", "protocol_violation")),
    "t09_global_threads": ("relu", ("global_state_changed",)),
    "h_segfault": ("relu", ("runtime_error",)),
    "h_infinite_loop": ("relu", ("timeout",)),
    "h_fork_storm": ("relu", ("runtime_error",)),
    "h_subprocess": ("relu", ("runtime_error",)),
    "h_big_alloc": ("relu", ("runtime_error",)),
    "h_network": ("relu", ("runtime_error",)),
}
# C++ cheats no runtime check can see (they call CPU kernels past the dispatcher): only the static C++ scan stands
# between them and a reward. Their runtime-only run is expected to fail (strict xfail: a new defence must say so).
STATIC_ONLY = ("s05_cpu_direct",)
# Caches keyed on an input's address: caught on every run by writing new values into the same tensors (stale_output).
POINTER_CACHES = ("s11_cache_data_ptr", "s11_cache_cpp_address")
# Cheats on timed calls that only a reference timed in the same run (``reference="paired"``, the default, or
# ``"every"``) checks one by one: run with 20 timed calls (the default) instead of 5.
EVERY_CALL = ("s12_late_window_py",)
# Library compute and tampering the source text hides (an alias, a thread, a name built at run time): judged by the
# built module's imports -> the flag that refuses it.
BINARY = {
    "b03_ops_alias_thread": "library_compute",
    "b04_redispatch": "monkeypatch",
    "b05_dlsym_lookup": "dynamic_code",
    "b06_raw_syscall_bytes": "raw_syscall",
    "b07_filebuf_file_read": "file_access",
}
# Compiler output the candidate writes that reads like the machine's fault: it decides nothing.
BUILD_TEXT = ("b01_disk_full_text", "b02_pch_refusal_text")
# Numerically unsafe kernels, right on the task's own randn: refused by the stress trials (scaled or offset
# inputs) -> the task they run on.
STRESS = {"n01_softmax_no_max": "plain_softmax", "n02_one_pass_layernorm": "layernorm"}
# Honest idioms every defence must accept -> the task they run on.
HONEST = {
    "honest_class_kernel": "relu",
    "honest_module_list": "linear",
    "honest_getattr_ext": "relu",
    "honest_softmax_max": "plain_softmax",
    "honest_layernorm_two_pass": "layernorm",
}
# Honest under the kernelbench policy (a small op left to torch, which strict refuses) -> the task they run on.
KERNELBENCH_HONEST = {"honest_softmax_small_op": "softmax", "honest_kernel_then_torch_op": "linear_wide"}
KERNELBENCH = EvalConfig(static_policy="kernelbench", run_timeout_s=10.0, timing=TIMING)


@dataclasses.dataclass
class Suite:
    runtime: LocalEvaluator
    full: LocalEvaluator
    tasks: dict[str, Task]
    traps: Traps

    def evaluate(self, mode: str, name: str, seed: int = 1) -> EvalResult:
        """Evaluate candidate ``name`` on its task under ``mode``; assert it stayed contained."""
        ev = self.runtime if mode == "runtime" else self.full
        result = ev.evaluate(self.tasks[task_key(name)], render(name, **self.traps.subs()), seed=seed)
        assert stray_processes([self.runtime, self.full]) == [], f"{name} left processes running"
        assert self.traps.breaches() == [], f"{name} got out of its sandbox"
        return result


def task_key(name: str) -> str:
    """The key in :func:`suite_tasks` of the task candidate ``name`` runs on."""
    return CASES[name][0] if name in CASES else {**HONEST, **STRESS, **KERNELBENCH_HONEST}.get(name, "relu")


def suite_tasks() -> dict[str, Task]:
    """The tasks the candidates run on, by the key :data:`CASES` and the other tables name (small CPU shapes).

    Shared with ``benchmarks/reachability_value.py``, which evaluates these candidates on the same tasks."""
    relu = get_task("l1_relu")
    small = dataclasses.replace(
        relu, id="l1_relu_small", shapes={"cpu": ({"batch_size": 64, "dim": 4096}, {"batch_size": 7, "dim": 1001})}
    )
    linear = get_task("l2_linear_relu")
    linear = dataclasses.replace(
        linear, id="l2_linear_relu_small",
        shapes={"cpu": ({"batch_size": 8, "in_features": 64, "out_features": 32},
                        {"batch_size": 3, "in_features": 33, "out_features": 17})},
    )  # fmt: skip
    # Wide enough that a matmul kernel's time dwarfs the ReLU torch applies to its result (the kernel-coverage floor).
    wide = dataclasses.replace(
        linear, id="l2_linear_relu_wide",
        shapes={"cpu": ({"batch_size": 64, "in_features": 512, "out_features": 128},
                        {"batch_size": 33, "in_features": 400, "out_features": 65})},
    )  # fmt: skip
    softmax = get_task("l1_softmax")
    softmax = dataclasses.replace(
        softmax,
        id="l1_softmax_small",
        shapes={"cpu": ({"batch_size": 64, "dim": 4096}, {"batch_size": 7, "dim": 1001})},
    )
    tasks = {"relu": small, "tiny": load_task_file(DATA_DIR / "tiny_relu.py"), "linear": linear, "softmax": softmax}
    tasks["linear_wide"] = wide
    tasks |= {"plain_softmax": load_task_file(DATA_DIR / "plain_softmax.py"), "layernorm": get_task("l1_layernorm")}
    return tasks


@pytest.fixture(scope="module")
def suite() -> Iterator[Suite]:
    assert become_subreaper(), "PR_SET_CHILD_SUBREAPER refused: orphaned processes could not be found"
    tasks = suite_tasks()
    with traps(_env.cache_dir() / "ext") as t:
        runtime, full = RuntimeOnlyEvaluator("cpu", RUNTIME_ONLY), LocalEvaluator("cpu", FULL)
        try:
            yield Suite(runtime, full, tasks, t)
        finally:
            runtime.close()
            full.close()


def _describe(r: EvalResult) -> str:
    return f"stage={r.stage.value} flags={list(r.flags)} warnings={list(r.warnings)} messages={list(r.messages)[:4]}"


def _no_reward(r: EvalResult) -> None:
    score = candidate_score(r)
    assert score is not None and score <= 0, f"positive or missing score {score}: {_describe(r)}"


def test_candidate_files_match_the_table() -> None:
    files = {p.stem for p in CANDIDATES_DIR.glob("*.py")}
    cases = set(CASES) | set(STATIC_ONLY) | set(POINTER_CACHES) | set(EVERY_CALL) | set(BINARY) | set(BUILD_TEXT)
    cases |= set(STRESS)
    assert files == cases | {"honest_relu"} | set(HONEST) | set(KERNELBENCH_HONEST)
    assert len(files) - 1 >= 30


def test_honest_kernel_passes_every_defence(suite: Suite) -> None:
    for mode in ("runtime", "full"):
        r = suite.evaluate(mode, "honest_relu")
        assert r.stage is Stage.CORRECT and not r.flags, _describe(r)
        assert r.extra["runtime"]["kernel_calls"] == [1] * r.trials_total
        assert r.extra["runtime"]["forbidden_ops"] == []
        score = candidate_score(r)
        assert score is not None and score >= 1.0


_INVISIBLE = pytest.mark.xfail(
    strict=True, reason="called past the dispatcher: neither the profiler nor the op-recording mode sees it"
)
RUNTIME_PARAMS = [*sorted(CASES), *(pytest.param(n, marks=_INVISIBLE) for n in STATIC_ONLY)]


@pytest.mark.parametrize("name", RUNTIME_PARAMS)
def test_runtime_defences_alone(suite: Suite, name: str) -> None:
    r = suite.evaluate("runtime", name)
    _no_reward(r)
    expected = CASES[name][1] if name in CASES else ("forbidden_aten_op",)
    assert r.stage.value in expected or set(r.flags) & set(expected), f"expected {expected}: {_describe(r)}"


@pytest.mark.parametrize("name", sorted([*CASES, *STATIC_ONLY]))
def test_no_positive_score_under_all_defences(suite: Suite, name: str) -> None:
    _no_reward(suite.evaluate("full", name))


def test_permissive_policy_reports_coverage_instead(suite: Suite) -> None:
    cfg = dataclasses.replace(RUNTIME_ONLY, runtime_policy="permissive")
    with RuntimeOnlyEvaluator("cpu", cfg) as ev:
        r = ev.evaluate(suite.tasks["relu"], render("s04_partial"), seed=2)
    assert r.stage is Stage.CORRECT, _describe(r)
    assert "forbidden_aten_op" in r.warnings and "forbidden_aten_op" not in r.flags
    coverage = r.extra["runtime"]["coverage"]
    assert 0.0 <= coverage["kernel"] < 1.0 and coverage["basis"] == "host"
    assert coverage["own_kernel_us"] > 0 and coverage["forbidden_torch_us"] > 0
    assert r.extra["runtime"]["forbidden_ops"] == ["aten::relu"]


def test_kernelbench_policy_needs_the_kernel_to_do_the_work(suite: Suite) -> None:
    """torch.softmax plus a memcpy "kernel" was correct under kernelbench (coverage read 0.94 from wall time): it is
    refused on every one of 5 runs by what its output is (torch_computed_output), and the kernels' share of the
    compute time is below the floor over the runs (median). The share is a measurement: 0.37-0.76 quiet, up to
    0.74 with a CI run beside it, 0.94 once in CI, so a single run may read over the floor; its flag then follows it.
    Kernels doing the softmax with one small op left to torch stay correct, their coverage above the floor."""
    covs = []
    with LocalEvaluator("cpu", KERNELBENCH) as ev:
        for seed in range(1, 6):
            r = ev.evaluate(suite.tasks["softmax"], render("s04_softmax_copy"), seed=seed)
            _no_reward(r)
            assert r.stage is Stage.CHEATING and "torch_computed_output" in r.flags, f"run {seed}: {_describe(r)}"
            assert set(r.flags) <= {"low_kernel_coverage", "torch_computed_output"}, f"run {seed}: {_describe(r)}"
            covs.append(r.extra["runtime"]["coverage"]["kernel"])
            below = covs[-1] < KERNEL_COVERAGE_FLOOR
            assert ("low_kernel_coverage" in r.flags) is below, f"run {seed}: {_describe(r)}"
        assert sorted(covs)[2] < KERNEL_COVERAGE_FLOOR, covs
        for name, task in KERNELBENCH_HONEST.items():
            r = ev.evaluate(suite.tasks[task], render(name), seed=6)
            assert r.stage is Stage.CORRECT and not r.flags, _describe(r)
            assert "forbidden_aten_op" in r.warnings, _describe(r)  # the small op is torch compute, reported
            assert r.extra["runtime"]["coverage"]["kernel"] >= KERNEL_COVERAGE_FLOOR, _describe(r)


def test_a_padded_copy_of_torchs_answer_is_refused_by_what_it_computed(suite: Suite) -> None:
    """torch.softmax passed through twelve copies: the padding lifts the kernels' time share over the floor (0.986
    read before), but the output is still the value aten::_softmax computed from forward's input. Refused on every
    one of 5 runs under kernelbench (torch_computed_output) and under the defaults; the honest candidates that leave
    a small op to torch, one of them on the kernel's output, stay correct under kernelbench."""
    name = "s04_softmax_padded_copy"
    with LocalEvaluator("cpu", KERNELBENCH) as ev:
        for seed in range(1, 6):
            r = ev.evaluate(suite.tasks["softmax"], render(name), seed=seed)
            _no_reward(r)
            assert r.stage is Stage.CHEATING and "torch_computed_output" in r.flags, f"run {seed}: {_describe(r)}"
            assert "aten::_softmax" in " ".join(r.messages), _describe(r)
        for honest, task in KERNELBENCH_HONEST.items():
            r = ev.evaluate(suite.tasks[task], render(honest), seed=6)
            assert r.stage is Stage.CORRECT and not r.flags, _describe(r)
            assert "torch_computed_output" not in r.warnings, _describe(r)
    for seed in range(1, 6):
        r = suite.evaluate("full", name, seed=seed)
        _no_reward(r)
        assert r.stage is Stage.CHEATING, f"run {seed}: {_describe(r)}"


@pytest.mark.parametrize("name", POINTER_CACHES)
def test_address_keyed_caches_are_caught_on_every_run(suite: Suite, name: str) -> None:
    """New values written into trial 1's own tensors, then a call (the rewrite run, on every evaluation): a cache
    keyed on the address answers with the old values' output. Before, only a sampled recheck could see it (caught in
    1 of 8 runs). When the allocator happens to hand a later trial's fresh input the address of an earlier one,
    the cache answers that trial with a stale output first: the trials' own comparison refuses it then, before the
    rewrite run is judged (which needs both its trials passed): ``incorrect``, or ``cheating`` when the poisoned
    repeat of trial 1 lands on a cached address as well (``nondeterministic``; seen in CI, trials 3 and 4 stale).
    Which addresses the allocator reuses differs between machines and runs, so either way counts as caught."""
    for seed in range(1, 6):
        r = suite.evaluate("runtime", name, seed=seed)
        _no_reward(r)
        stale_trial = r.trials_passed < r.trials_total and r.stage in (Stage.INCORRECT, Stage.CHEATING)
        assert "stale_output" in r.flags or stale_trial, f"run {seed}: {_describe(r)}"


@pytest.mark.parametrize("name", EVERY_CALL)
@pytest.mark.parametrize("mode", ["paired", "reference_every", "all_probed"])
def test_every_timed_call_checked(suite: Suite, name: str, mode: str) -> None:
    # Paired or side by side, the reference's own timed outputs check every call; with the dedicated host's cached
    # reference, probes covering all 17 calls the fixed checks leave do the same at a reference forward each.
    # Every one of the 20 pairs runs (stop_width=0): paired timing would otherwise stop once the speedup is known
    # (after 10 pairs at the least), before this cheat's window opens, and it would never act at all.
    timing = TimingConfig(warmup=1, repeats=20, max_time_s=5.0, stop_width=0.0)
    if mode == "reference_every":
        timing = timing.replace(reference="every")
    elif mode == "all_probed":
        timing = timing.replace(reference="dedicated_host", probes=17)
    with RuntimeOnlyEvaluator("cpu", dataclasses.replace(RUNTIME_ONLY, timing=timing)) as ev:
        for seed in (1, 2, 3):
            r = ev.evaluate(suite.tasks["relu"], render(name), seed=seed)
            assert "timed_output_mismatch" in r.flags, f"seed {seed}: {_describe(r)}"
        honest = ev.evaluate(suite.tasks["relu"], render("honest_relu"), seed=4)
        assert honest.stage is Stage.CORRECT and not honest.flags, _describe(honest)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_built_module_is_judged_by_its_imports(suite: Suite, name: str) -> None:
    """Refused on every one of 5 runs before the module is loaded (no kernel call, no output); the honest
    kernel passes the same check."""
    with BinaryOnlyEvaluator("cpu", RUNTIME_ONLY) as ev:
        for seed in range(1, 6):
            r = ev.evaluate(suite.tasks["relu"], render(name), seed=seed)
            _no_reward(r)
            assert r.stage is Stage.CHEATING and BINARY[name] in r.flags, f"run {seed}: {_describe(r)}"
            assert r.trials_total == 0, _describe(r)  # its module was never loaded: no trial ran
        honest = ev.evaluate(suite.tasks["relu"], render("honest_relu"), seed=6)
        assert honest.stage is Stage.CORRECT and not honest.flags, _describe(honest)


def _headers() -> tuple[set[str], str]:
    pch = _env.cache_dir() / "pch"
    macros = pch / "macros.json"
    return {p.parent.name for p in pch.glob("*/musaenv_pch.h.gch")}, macros.read_text() if macros.exists() else ""


def test_compiler_text_decides_nothing(suite: Suite) -> None:
    """A log reading "No space left on device" is the candidate's compile error (scored, never infra_error); a
    #warning reading like GCC's refusal of the shared header retires and keys nothing (the kernel is honest)."""
    before = _headers()
    for seed in range(1, 6):
        r = suite.evaluate("full", "b01_disk_full_text", seed=seed)
        assert r.stage is Stage.COMPILE_ERROR, f"run {seed}: {_describe(r)}"
        r = suite.evaluate("full", "b02_pch_refusal_text", seed=seed)
        assert r.stage is Stage.CORRECT, f"run {seed}: {_describe(r)}"
    assert _headers() == before


@pytest.mark.parametrize("name", sorted(STRESS))
def test_numerically_unsafe_kernels_fail_the_stress_trials(suite: Suite, name: str) -> None:
    """Right on the task's own inputs (all 5 ordinary trials pass: without stress trials it is ``correct``), wrong
    on scaled or offset ones where the reference stays finite and well-conditioned: refused on every one of 5 runs
    (secret plans: new scales and offsets each time), the feedback naming the transform."""
    for seed in range(1, 6):
        r = suite.evaluate("full", name, seed=seed)
        _no_reward(r)
        assert r.stage is Stage.INCORRECT and r.trials_passed >= 5 and not r.flags, f"run {seed}: {_describe(r)}"
        assert "a stress trial, inputs scaled by" in r.messages[0], _describe(r)
    plain = dataclasses.replace(FULL, stress_trials=0)
    with LocalEvaluator("cpu", plain) as ev:
        r = ev.evaluate(suite.tasks[STRESS[name]], render(name), seed=6)
    assert r.stage is Stage.CORRECT, _describe(r)  # the hole the stress trials close


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_idioms_are_correct(suite: Suite, name: str) -> None:
    """A py::class_ method as the kernel (counted as a kernel call), modules collected in forward without being
    called, a computed lookup on the candidate's own extension: correct under every defence, kernel calls seen."""
    r = suite.evaluate("full", name)
    assert r.stage is Stage.CORRECT and not r.flags, _describe(r)
    assert all(n >= 1 for n in r.extra["runtime"]["kernel_calls"]), _describe(r)
