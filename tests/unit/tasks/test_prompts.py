"""Prompts and feedback stay inside the observation charset and carry what the policy needs."""

from __future__ import annotations

from musaenv.backends import get_backend
from musaenv.tasks.builtin import get_task
from musaenv.tasks.prompts import OBS_CHARSET, feedback_text, initial_prompt, sanitize, turn_prompt


def test_initial_prompt_has_reference_rules_and_shapes():
    p = initial_prompt(get_task("l1_relu"), get_backend("cpu"), "cpu")
    assert "class Model" in p and "ModelNew" in p and "cheating" in p and "Input shapes tested" in p
    assert set(p) <= OBS_CHARSET


def test_sanitize_transliterates_compiler_quotes():
    assert sanitize("error: \u2018x\u2019 was not declared \u2014 \u00e9") == "error: 'x' was not declared - ?"


def test_feedback_is_truncated_to_budget():
    ev = {"stage": "compile_error", "compiler_log": "e" * 10_000, "messages": ["m"]}
    text = feedback_text(ev, -1.0, 500)
    assert len(text) <= 500 and text.startswith("Verdict: compile_error") and "truncated" in text


def test_turn_prompt_keeps_history():
    text = turn_prompt("FIRST", [("resp1", "fb1"), ("resp2", "fb2")])
    assert text.index("resp1") < text.index("fb1") < text.index("resp2") < text.index("fb2")


def test_the_policy_is_named_in_the_prompt_and_changes_the_kernel_rule():
    task = get_task("l1_relu")
    strict, kb = (
        initial_prompt(task, get_backend("cuda"), "gpu"),
        initial_prompt(task, get_backend("cuda"), "gpu", "kernelbench"),
    )
    assert "verification policy: strict" in strict and "No torch compute ops" in strict
    assert "verification policy: kernelbench" in kb and "may stay" in kb and "No torch compute ops" not in kb
    assert set(kb) <= OBS_CHARSET


def test_the_cupy_format_is_stated_in_its_prompt_with_an_example():
    p = initial_prompt(get_task("l1_relu"), get_backend("cupy"), "gpu")
    assert "cupy.RawModule(code=SRC)" in p and "get_function" in p and "kernel(grid, block, args)" in p
    assert "no CuPy array math" in p and "cupy.RawModule/RawKernel call with your kernel sources" in p
    assert "load_inline call" not in p and set(p) <= OBS_CHARSET
    assert "cupy" not in initial_prompt(get_task("l1_relu"), get_backend("cuda"), "gpu")


def test_the_triton_prompt_says_what_the_cpu_interpreter_supports():
    p = initial_prompt(get_task("l1_relu"), get_backend("triton"), "cpu")
    assert "launch at least one of your own kernels" in p and "refused, whatever the policy" in p
    assert "x.is_cuda" in p and "interpreter" in p and "needs a GPU" in p and "get_device_properties" not in p
    assert set(p) <= OBS_CHARSET
    kb = initial_prompt(get_task("l1_relu"), get_backend("triton"), "cpu", "kernelbench")
    assert "every call of forward must run at least one of your" in " ".join(kb.split())


def test_feedback_gives_the_paired_speedup_its_interval_and_says_when_it_straddles_parity() -> None:
    base = {"stage": "correct", "speedup": 1.2, "runtime_ms": 1.0, "ref_runtime_ms": 1.2, "timing_pairs": 13}
    straddles = feedback_text({**base, "speedup_low": 0.9, "speedup_high": 1.5}, 1.1, 2000)
    assert "95% interval 0.900-1.500x over 13 paired calls" in straddles
    assert "not significantly different" in straddles
    clear = feedback_text({**base, "speedup_low": 1.1, "speedup_high": 1.3}, 1.1, 2000)
    assert "interval" in clear and "not significantly" not in clear
    assert "interval" not in feedback_text({**base, "timing_pairs": 0}, 1.1, 2000)  # a cached reference: no interval
