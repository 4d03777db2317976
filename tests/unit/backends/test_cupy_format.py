"""The CuPy candidate format without a GPU: the backend resolves to compile-only, an episode gives clear verdicts
(``compile_error`` with NVRTC's log, ``compiled``), and the worker's hook records and checks every kernel build.

Needs the cupy extra; skipped without it. On a GPU machine the episode runs for real (tests/gpu/test_cupy_gpu.py).
"""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the cupy extra (cupy-cuda13x, nvidia-cuda-nvrtc)")
torch = pytest.importorskip("torch")

import musaenv  # noqa: E402,F401  (registers KernelGen-v0)
from musaenv.backends import resolve_backend  # noqa: E402
from tests.gpu.cupy_candidates import BROKEN_RELU_CUPY, RELU_CUPY, SOFTMAX_CUPY  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="compile-only behaviour: this machine has a GPU")


def test_the_cupy_backend_is_compile_only_without_a_gpu():
    b = resolve_backend("cupy")
    assert (b.name, b.device, b.compile_only) == ("cupy", "cpu", True)
    assert "NVRTC" in b.reason


def test_an_episode_on_the_cupy_format_states_it_and_gives_clear_verdicts():
    env = gym.make("KernelGen-v0", task="l1_relu", backend="cupy", max_turns=3)
    try:
        obs, info = env.reset(seed=0)
        assert "cupy.RawModule" in obs and info["backend"] == "cupy"
        _, _, terminated, _, info = env.step("```python\n" + BROKEN_RELU_CUPY + "\n```")
        ev = info["eval"]
        assert ev["stage"] == "compile_error" and not terminated
        assert 'error: identifier "xx" is undefined' in ev["compiler_log"]  # NVRTC's own diagnostic
        assert "Compiler output" in info["feedback"] and "undefined" in info["feedback"]  # what the policy reads
        _, _, _, _, info = env.step("```python\n" + RELU_CUPY + "\n```")
        ev = info["eval"]
        assert ev["stage"] == "compiled", ev
        assert "no cupy device here" in " ".join(ev["messages"])
        assert 0 < ev["compile_time_s"] < 30
    finally:
        env.close()


def test_a_raw_kernel_built_at_import_is_checked_too():
    from musaenv.evaluator.local import LocalEvaluator
    from musaenv.tasks.builtin import get_task

    with LocalEvaluator("cupy") as ev:
        good = ev.evaluate(get_task("l1_softmax"), SOFTMAX_CUPY)
        bad = ev.evaluate(get_task("l1_softmax"), SOFTMAX_CUPY.replace("fmaxf(m, row[j])", "fmaxf(m, row[j]"))
    assert good.stage.value == "compiled", good.to_dict()
    assert [b["name"] for b in good.extra["builds"]] == ["RawKernel softmax_rows"]
    assert bad.stage.value == "compile_error" and "error" in bad.compiler_log
