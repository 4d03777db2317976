"""Prompt and feedback text shown to the policy. No torch here.

Observations are plain printable ASCII (gymnasium's ``Text`` space needs a fixed charset): typographic
quotes that compilers print are transliterated, anything else outside the charset becomes ``?``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any, Protocol

from musaenv.tasks.task import Task

__all__ = [
    "OBS_CHARSET", "RULES", "SUBMIT_TOOL", "answer_line", "feedback_message", "feedback_text", "initial_prompt",
    "rules", "sanitize", "tool_instruction", "turn_prompt",
]  # fmt: skip

OBS_CHARSET = frozenset(string.printable)
_OUTSIDE_CHARSET = re.compile(r"[^\t\n\r\x0b\x0c\x20-\x7e]")  # the complement of string.printable
_TRANSLIT = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2026": "...",
        "\u00a0": " ",
    }
)


class PromptedBackend(Protocol):
    """What a prompt reads of a backend: a :class:`musaenv.backends.Backend` (the tasks never import the backends)."""

    @property
    def prompt_note(self) -> str: ...

    @property
    def loader_call(self) -> str: ...


_KERNEL_RULE = {
    "strict": """- ModelNew.forward must compute the output with your own kernels. Only tensor plumbing may use PyTorch:
  allocation (torch.empty/zeros/...), views and reshapes, .contiguous(), copies, casts, reading parameters.
  No torch compute ops (matmul, relu, sum, softmax, conv, ...), no nn modules called in forward, no fallback
  to PyTorch in try/except, no calls into cuBLAS/cuDNN or at::/torch:: compute inside C++.""",
    "kernelbench": """- ModelNew.forward must call your own kernels for the operators you replace; the others may stay
  in PyTorch (as in KernelBench), but only beside them: every call of forward must run at least one of your
  kernels, and your kernels must take at least 80% of forward's compute time (a kernel that only copies what
  torch computed is refused). No try/except anywhere, and no subclassing of the reference Model.""",
    "permissive": """- ModelNew.forward must call your own kernels on every call; torch compute beside them is reported,
  not refused. No fallback to PyTorch in try/except.""",
    "off": "- Only the rules below are enforced.",
}
_COMMON_RULES = """- No exec/eval, no Python threads or processes, no network, no files, no monkeypatching, no reading
  the environment or the evaluator's state. Do not cache outputs between calls or modify the inputs.
- In C++: std::thread / std::async joined before returning, at::parallel_for, OpenMP and at::vec::Vectorized
  are fine, but timed calls run pinned to the reference's cores, so extra threads buy nothing. Refused: raw
  thread and process APIs (pthread_create, thrd_create, clone, fork), the CPython C API, BLAS/LAPACK/MKL
  entry points (sgemm, cblas_*, mkl_*), system calls in inline asm.
- Build flags: only -O*, -std=, -march=/-mtune=, ISA flags (-mavx2, -mfma, ...), -ffast-math, -funroll-loops,
  -fopenmp, -D/-U macros, warnings (nvcc: also --use_fast_math, -arch=sm_NN, -Xptxas, -lineinfo); linker:
  -l of the C/CUDA runtime libraries. Any other flag or include path is refused as a format_error.
- Outputs must match the reference within tolerance on fresh random inputs, for several input shapes:
  never hard-code sizes."""


def rules(policy: str = "strict") -> str:
    """The rules shown to the policy (the model) under the verification ``policy`` (docs/verification.md)."""
    return (
        f"Rules (verification policy: {policy}; a violation is judged `cheating` and scores -1):\n"
        f"{_KERNEL_RULE.get(policy, _KERNEL_RULE['strict'])}\n{_COMMON_RULES}"
    )


RULES = rules("strict")


def sanitize(text: str) -> str:
    """Map text into :data:`OBS_CHARSET`."""
    return _OUTSIDE_CHARSET.sub("?", text.translate(_TRANSLIT))


def _shape_line(task: Task, tier: str) -> str:
    shapes = task.shapes_for(tier)
    if len(shapes) == 1 and not shapes[0]:
        return "Inputs: as produced by get_inputs() of the reference."
    listed = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in shapes)
    return f"Input shapes tested (the first one is timed): {listed}."


def initial_prompt(task: Task, backend: PromptedBackend, tier: str, policy: str = "strict") -> str:
    """Turn-1 observation: task statement, reference program, rules under ``policy`` and output format."""
    shapes = task.shapes_for(tier)
    parts = [
        f"Task {task.id} (level {task.level}): {task.name}.",
        task.description or "",
        "Write a faster implementation of the PyTorch reference program below as a class ModelNew(nn.Module) "
        "with the same constructor and forward signature as Model.",
        backend.prompt_note,
        f"Dtype: {task.dtype}; tolerance atol={task.atol:g}, rtol={task.rtol:g}. {_shape_line(task, tier)}",
        "Reference program:\n```python\n" + task.render_source(shapes[0]).rstrip() + "\n```",
        rules(policy),
        answer_line(backend),
    ]
    return sanitize("\n\n".join(p for p in parts if p))


SUBMIT_TOOL = "submit_kernel"
"""The tool that takes a program, for tool-calling trainers (TRL's ``environment_factory``)."""


def tool_instruction(tool: str = SUBMIT_TOOL) -> str:
    """The short user message of a tool-calling trainer's dataset row; the task prompt follows it (TRL appends it)."""
    return (
        f"You write fast custom kernels. The task follows. Call the tool `{tool}` with the complete Python "
        "program (imports, the load_inline call with your kernel sources, and class ModelNew). The verifier answers "
        "with its verdict; fix the problems and submit again until the verdict is `correct`."
    )


def answer_line(backend: PromptedBackend, tool: str | None = None) -> str:
    """The last paragraph of :func:`initial_prompt`: how to hand in the program.

    Args:
        backend: Backend the prompt is written for (names the kernel loader).
        tool: Name of the tool that takes the program as its ``code`` argument (TRL's ``submit_kernel``);
            ``None``: the program comes as one fenced code block in the reply.
    """
    program = (
        "the complete program (imports, the "
        + backend.loader_call
        + " call with your kernel sources, and class ModelNew)"
    )
    if tool is None:
        return f"Answer with exactly one fenced python code block containing {program}."
    return f"Call the tool `{tool}` with {program} as its `code` argument (plain code, no fence)."


def _speedup_line(evaluation: Mapping[str, Any]) -> str:
    """The speedup, its interval when paired timing measured one, and whether it is significantly above 1."""
    v = float(evaluation["speedup"])
    times = f"{evaluation.get('runtime_ms') or 0:.4f} ms vs {evaluation.get('ref_runtime_ms') or 0:.4f} ms"
    low, high = evaluation.get("speedup_low"), evaluation.get("speedup_high")
    if low is None or high is None:
        return f"Speedup over the reference: {v:.3f}x ({times})"
    line = f"Speedup over the reference: {v:.3f}x (95% interval {low:.3f}-{high:.3f}x over "
    line += f"{evaluation.get('timing_pairs') or 0} paired calls; {times})"
    if low <= 1.0 < high:  # the score rule for a straddled threshold: docs/rewards.md
        line += "; not significantly different from the reference's speed"
    return line


def feedback_text(evaluation: Mapping[str, Any], score: float | None, budget_chars: int) -> str:
    """Summarise an EvalResult dict for the policy, within ``budget_chars``."""
    stage = evaluation.get("stage", "?")
    lines = [f"Verdict: {stage}" + (f" (score {score:.3f})" if score is not None else "")]
    if evaluation.get("trials_total"):
        lines.append(f"Correctness trials passed: {evaluation['trials_passed']}/{evaluation['trials_total']}")
    if evaluation.get("max_abs_error") is not None:
        lines.append(f"Worst absolute error: {evaluation['max_abs_error']:.3g}")
    if evaluation.get("speedup") is not None:
        lines.append(_speedup_line(evaluation))
    if evaluation.get("flags"):
        lines.append("Flags: " + ", ".join(evaluation["flags"]))
    lines.extend(f"- {m}" for m in evaluation.get("messages", []))
    for key, title in (("compiler_log", "Compiler output"), ("runtime_log", "Runtime error")):
        if evaluation.get(key):
            lines.append(f"{title}:\n{evaluation[key]}")
    text = "\n".join(lines)
    if len(text) > budget_chars:
        text = text[: budget_chars - 40] + "\n... [feedback truncated]"
    return sanitize(text)


RETRY_LINE = "Fix the problems above and answer again with one complete fenced python code block."
EPISODE_OVER = "Episode over. Last verdict:\n"


def feedback_message(feedback: str, done: bool) -> str:
    """The new user message after a turn, for chat-based trainers that keep the conversation themselves.

    Args:
        feedback: :func:`feedback_text` of the turn.
        done: Whether the episode ended with this turn (then no retry is asked for).
    """
    return EPISODE_OVER + feedback if done else sanitize(feedback + "\n\n" + RETRY_LINE)


def turn_prompt(first_prompt: str, history: list[tuple[str, str]], response_chars: int = 12000) -> str:
    """Observation for a later turn: the first prompt, then each (response, feedback) pair so far."""
    parts = [first_prompt]
    for k, (response, feedback) in enumerate(history, start=1):
        shown = response if len(response) <= response_chars else response[:response_chars] + "\n... [cut]"
        parts.append(f"--- Your attempt {k} ---\n{shown}\n--- Verifier feedback on attempt {k} ---\n{feedback}")
    parts.append(RETRY_LINE)
    return sanitize("\n\n".join(parts))
