"""Hostile candidates against the parent's measurement (issue #25): a forged clock or forged reports, work moved
out of the timed window (into the warm-up, into the harness's input clone or input draw) or deferred past the call.

Each runs on seeds 1-5 under the two evaluators of :mod:`test_adversarial` (same settings): ``runtime`` (static and
binary checks off: what the runtime checks and the parent's own measurement catch by themselves) and ``full`` (the
defaults). Under ``full`` none may score above 0 on any run. Under ``runtime`` each must end in the flag or stage
of :data:`RUNTIME_CATCHES` on every run; :data:`RUNTIME_ESCAPES` lists those the runtime layer alone lets through,
with the mechanism (a strict xfail: a defence that starts catching one must move it); :data:`RUNTIME_DEFEATED`
those whose cheat finds nothing to work with any more (shown with their cheat's answers made wrong). After every
evaluation nothing the candidate started may still run and nothing may have left the sandbox.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from musaenv import _env
from musaenv.evaluator.local import LocalEvaluator
from musaenv.rewards import candidate_score
from musaenv.tasks.builtin import get_task
from musaenv.tasks.task import Task
from musaenv.types import EvalResult, Stage
from tests.adversarial.containment import Traps, become_subreaper, stray_processes, traps
from tests.adversarial.hostile_kernels import preamble, render
from tests.adversarial.test_adversarial import FULL, RUNTIME_ONLY, RuntimeOnlyEvaluator

pytestmark = pytest.mark.slow

MEASURE_DIR = Path(__file__).parent / "candidates_measure"
SEEDS = range(1, 6)
_BASE = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"

# candidate -> the flags or stages of which one must end each of its runtime-only runs.
RUNTIME_CATCHES: dict[str, tuple[str, ...]] = {
    # the parent's CPU time of each call against the worker's own (slowed) measure
    "m_clock_slot_cpp": ("timing_forged",),
    "m_gate_report_py": ("timing_forged",),
    # The worker dies in its trials (exit 0): its zero-copy numpy view of the output goes to the pipe, whose write
    # fails with EFAULT on the unreadable pages (checked by hand) where no SIGSEGV handler runs.
    "m_fault_pages_cpp": ("runtime_error",),
    # the guard's snapshot of the harness operators' dispatcher tables (runtime_probe.HARNESS_OPS), taken before
    # the candidate loaded: a kernel it registered for aten::clone is the harness's tampering
    "m_clone_override_py": ("harness_tampering",),
    # torch.randn replaced, or a Python mode left entered: the worker's check of what a timed draw reaches, before
    # and after each draw (musaenv.verification.draw_watch), names it
    "m_draw_patch_py": ("harness_tampering",),
    "m_draw_mode_py": ("harness_tampering",),
    # a Python SIGALRM handler on an interval timer, which found the drawn inputs in the harness's frame: the draw
    # watch compares the Python-level signal handlers with its snapshot too
    "m_draw_signal_py": ("harness_tampering",),
    # torch.Tensor.fill_ replaced (the cache flush after the draw calls it), put back after three calls: the draw
    # watch compares per draw the names the timing loop looks up up to the window as well
    "m_flush_patch_py": ("harness_tampering",),
    # a helper thread left running to slow the interleaved reference: more threads after the forward than before
    # it (a CPU-backend error), and the parent's CPU time of each call against the worker's own measure
    "m_slow_reference_cpp": ("thread_started", "timing_forged"),
}
# candidate -> how it passes the runtime layer alone (only the static checks refuse it under the defaults).
RUNTIME_ESCAPES: dict[str, str] = {}

# escape -> (its cheat's answer, a constant from its own kernels in its place, the flags of which one must then end
# the run): the cheat's path is really taken (else its xfail would also pass on a candidate that went honest).
SABOTAGED: dict[str, tuple[str, str, tuple[str, ...]]] = {}

# Cheats that find nothing to cheat with, so no flag can name them: candidate -> (its cheat's answer, a constant in
# its place). With its answer made wrong it still ends `correct` on every run: its cheating path never answers a
# timed call, the kernel computes each one inside its window. m_pool_precompute_py searched the warm-up call's
# frames for the timing pool (it was there, drawn ahead) to compute every timed output before the first window;
# now each timed call's inputs are drawn when the parent prepares it, from a seed it picks then (TimePrepare.seed).
RUNTIME_DEFEATED: dict[str, tuple[str, str]] = {
    "m_pool_precompute_py": ("return answer", "return ext.fill_const(answer, -1.0)"),
    # m_draw_finalizer_py's finaliser ran between each draw and its window: the collector is off there now
    "m_draw_finalizer_py": ("answer = hit[1]", "answer = ext.fill_const(hit[1], -1.0)"),
}


def render_measure(name: str, swap: tuple[str, str] | None = None) -> str:
    """Source of ``candidates_measure/<name>.py`` with its preamble (``ext``: the shared clean extension);
    ``swap``: ``(old, new)`` text replaced once (it must be there)."""
    text = (MEASURE_DIR / f"{name}.py").read_text()
    if swap is not None:
        assert text.count(swap[0]) == 1, f"{swap[0]!r} not once in {name}"
        text = text.replace(*swap)
    text = text.replace("from adversarial import ext\n", preamble("ext"))
    return text.replace("from adversarial import base\n", _BASE)


@dataclasses.dataclass
class Measured:
    runtime: LocalEvaluator
    full: LocalEvaluator
    task: Task
    traps: Traps

    def evaluate(self, mode: str, source: str, seed: int) -> EvalResult:
        """Evaluate ``source`` under ``mode``; assert it stayed contained."""
        result = (self.runtime if mode == "runtime" else self.full).evaluate(self.task, source, seed=seed)
        assert stray_processes([self.runtime, self.full]) == [], "a candidate left processes running"
        assert self.traps.breaches() == [], "a candidate got out of its sandbox"
        return result


@pytest.fixture(scope="module")
def measured() -> Iterator[Measured]:
    assert become_subreaper(), "PR_SET_CHILD_SUBREAPER refused: orphaned processes could not be found"
    relu = get_task("l1_relu")
    small = dataclasses.replace(
        relu, id="l1_relu_small", shapes={"cpu": ({"batch_size": 64, "dim": 4096}, {"batch_size": 7, "dim": 1001})}
    )
    with traps(_env.cache_dir() / "ext") as t:
        runtime, full = RuntimeOnlyEvaluator("cpu", RUNTIME_ONLY), LocalEvaluator("cpu", FULL)
        try:
            yield Measured(runtime, full, small, t)
        finally:
            runtime.close()
            full.close()


def _describe(r: EvalResult) -> str:
    return f"stage={r.stage.value} flags={list(r.flags)} warnings={list(r.warnings)} speedup={r.speedup}"


def test_candidate_files_match_the_tables() -> None:
    assert {p.stem for p in MEASURE_DIR.glob("*.py")} == set(RUNTIME_CATCHES) | set(RUNTIME_ESCAPES) | set(
        RUNTIME_DEFEATED
    )


def test_honest_kernel_is_not_taken_for_a_forger(measured: Measured) -> None:
    r = measured.evaluate("runtime", render("honest_relu"), seed=1)
    assert r.stage is Stage.CORRECT and not r.flags, _describe(r)


RUNTIME_PARAMS = [
    *sorted(RUNTIME_CATCHES),
    *(pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=why)) for n, why in sorted(RUNTIME_ESCAPES.items())),
]


@pytest.mark.parametrize("name", RUNTIME_PARAMS)
def test_runtime_layer_alone_refuses_every_run(measured: Measured, name: str) -> None:
    expected = RUNTIME_CATCHES.get(name, ("cheating",))
    for seed in SEEDS:
        r = measured.evaluate("runtime", render_measure(name), seed)
        score = candidate_score(r)
        assert score is not None and score <= 0, f"run {seed}: score {score}: {_describe(r)}"
        assert r.stage.value in expected or set(r.flags) & set(expected), f"run {seed}, {expected}: {_describe(r)}"


@pytest.mark.parametrize("name", sorted(RUNTIME_DEFEATED))
def test_defeated_cheats_never_answer_a_timed_call(measured: Measured, name: str) -> None:
    """The cheat's answers made wrong: every run still `correct` (a returned answer would be
    timed_output_mismatch), so every timed output was computed in its window."""
    for seed in SEEDS:
        r = measured.evaluate("runtime", render_measure(name, RUNTIME_DEFEATED[name]), seed)
        assert r.stage is Stage.CORRECT and not r.flags, f"run {seed}: {_describe(r)}"


@pytest.mark.parametrize("name", sorted([*RUNTIME_CATCHES, *RUNTIME_ESCAPES, *RUNTIME_DEFEATED]))
def test_defaults_refuse_every_run(measured: Measured, name: str) -> None:
    for seed in SEEDS:
        r = measured.evaluate("full", render_measure(name), seed)
        score = candidate_score(r)
        assert score is not None and score <= 0, f"run {seed}: score {score}: {_describe(r)}"


@pytest.mark.parametrize("name", sorted(SABOTAGED))
def test_escapes_take_their_cheating_path(measured: Measured, name: str) -> None:
    """With the cheat's answer made wrong the runtime layer refuses the run for it: the escape above is the cheat
    working, not a candidate that computed honestly."""
    old, new, expected = SABOTAGED[name]
    r = measured.evaluate("runtime", render_measure(name, (old, new)), seed=1)
    assert r.stage.value in expected or set(r.flags) & set(expected), f"{expected}: {_describe(r)}"
