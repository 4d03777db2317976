"""A fixed pool of candidate responses per built-in task, for discrete-action adapters and scripted agents.

Every program is derived from the task's shipped reference solution (``musaenv/tasks/solutions/<backend>/``), so a
pool over several variants costs one C++ build per task (the build cache is keyed by the C++ source, not the Python
around it); the failing variants either reuse that build or fail before anything is compiled:

* ``fast``: the shipped solution: ``correct``.
* ``slow``: the same kernel run four times per call: ``correct``, roughly 4x slower, no new build.
* ``wrong``: the kernel applied to inputs whose leading rows are rotated by one: ``incorrect`` (on tasks that are
  not invariant to such a rotation, which is every built-in task whose first input is batched row-wise).
* ``crash``: the kernel called with twice its arguments: the extension rejects them (``runtime_error``).
* ``cheat``: ``forward`` is the reference's own PyTorch code: refused by the static checks (``cheating``), never
  built.
* ``prose``: a reply without code: ``format_error`` in microseconds.

The verdicts above are what the real evaluator returns on the CPU backend (measured by the adapter tests); a pool is
only a list of response texts, so a verdict is never assumed, always evaluated.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from musaenv.errors import ConfigError
from musaenv.tasks.builtin import get_task, solution_source

__all__ = ["PROGRAMS", "CandidatePool", "program_response"]

PROGRAMS: tuple[str, ...] = ("fast", "slow", "wrong", "crash", "cheat", "prose")
"""Names of the built-in program variants, in action order."""

_SOLUTION_CLASS = "class ModelNew(nn.Module):"

_VARIANTS: dict[str, str] = {
    "slow": """
class ModelNew(_Shipped):
    def forward(self, *args):
        out = super().forward(*args)
        for _ in range(3):  # the same work three more times: correct and about 4x slower
            out = super().forward(*args)
        return out
""",
    "wrong": '''
def _rotate_rows(t):
    """A copy of ``t`` whose rows are rotated by one (plumbing only: clone and slicing)."""
    if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] < 2:
        return t
    out = t.clone()
    out[:-1] = t[1:]
    out[-1] = t[0]
    return out


class ModelNew(_Shipped):
    def forward(self, *args):
        return super().forward(*[_rotate_rows(a) for a in args])
''',
    "crash": """
class ModelNew(_Shipped):
    def forward(self, *args):
        return super().forward(*args, *args)  # twice the arguments: the extension raises TypeError
""",
}

_PROSE = "I would fuse this operator into one C++ loop over the elements, but I have not written the code yet."


def _fence(code: str, note: str) -> str:
    return f"{note}\n\n```python\n{code.rstrip()}\n```\n"


def _reference_parts(task_id: str) -> tuple[str, str]:
    """The reference's import lines and its ``Model.forward`` source, to build a cheating ``ModelNew``."""
    tree = ast.parse(get_task(task_id).source)
    imports = "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return imports, ast.unparse(item)
    raise ConfigError(f"program 'cheat' for {task_id!r}: the reference has no Model.forward to copy")


def program_response(task_id: str, program: str, backend: str = "cpu") -> str:
    """The response text of one built-in program variant.

    Args:
        task_id: A built-in task with a shipped solution for ``backend`` (see ``solved_task_ids``).
        program: One of :data:`PROGRAMS`.
        backend: Whose shipped solution the variants are derived from.

    Raises:
        ConfigError: unknown program name.
        TaskLoadError: no solution ships for that task and backend.
    """
    if program not in PROGRAMS:
        raise ConfigError(f"program: expected one of {list(PROGRAMS)}, found {program!r}")
    if program == "prose":
        return _PROSE
    solution = solution_source(task_id, backend)
    if program == "fast":
        return _fence(solution, "Here is a custom kernel:")
    if _SOLUTION_CLASS not in solution:
        raise ConfigError(f"program {program!r} for {task_id!r}: the shipped solution lacks {_SOLUTION_CLASS!r}")
    base = solution.replace(_SOLUTION_CLASS, "class _Shipped(nn.Module):")
    if program == "cheat":
        imports, forward = _reference_parts(task_id)
        body = "\n".join("    " + line for line in forward.splitlines())
        code = f"{imports}\n{base}\n\nclass ModelNew(_Shipped):\n{body}\n"
    else:
        code = base + "\n" + _VARIANTS[program]
    return _fence(code, f"Here is a custom kernel ({program} variant):")


@dataclass(frozen=True)
class CandidatePool:
    """Per-task lists of candidate responses with shared names: action ``i`` is response ``i`` of the task.

    Attributes:
        names: One name per action (e.g. :data:`PROGRAMS`).
        responses: Task id -> one response text per name.
    """

    names: tuple[str, ...]
    responses: Mapping[str, tuple[str, ...]]

    def __post_init__(self) -> None:
        if not self.names:
            raise ConfigError("CandidatePool: expected at least one program name, found none")
        if not self.responses:
            raise ConfigError("CandidatePool: expected at least one task, found none")
        for task_id, texts in self.responses.items():
            if len(texts) != len(self.names):
                raise ConfigError(
                    f"CandidatePool: expected {len(self.names)} responses for {task_id!r} (one per name), "
                    f"found {len(texts)}"
                )

    @classmethod
    def builtin(
        cls, task_ids: Sequence[str], programs: Sequence[str] = PROGRAMS, backend: str = "cpu"
    ) -> CandidatePool:
        """The built-in variants (:func:`program_response`) for each task."""
        names = tuple(programs)
        return cls(names, {t: tuple(program_response(t, p, backend) for p in names) for t in task_ids})

    @property
    def task_ids(self) -> tuple[str, ...]:
        """The pool's tasks, in insertion order."""
        return tuple(self.responses)

    def response(self, task_id: str, index: int) -> str:
        """Response ``index`` of ``task_id``."""
        return self.responses[task_id][index]
