"""A fixed pool of candidate responses per built-in task, and their verdicts from the real evaluator, cached.

Shared by ``ablation_primeecho.py`` (the policy picks among these programs) and ``record_trajectories.py``
(scripted episodes for ``tests/data/trajectories``). Every program is built from the shipped CPU solution so that
the pool costs few compiles:

* ``fast``: the shipped solution (correct, usually faster than eager PyTorch on one thread).
* ``slow``: the same C++ source, but ``forward`` runs the kernel four times: correct and about 4x slower, no new
  compile.
* ``partial``: the same kernel, but the output is replaced by zeros when the leading dimension is odd; every
  built-in task's second CPU shape has an odd leading size, so 3 of 5 trials pass (s = -0.5 + 0.5 q = -0.2).
* ``wrong``: the kernel applied to wrongly plumbed inputs (rows shifted by one): incorrect on every trial.
* ``crash``: calls a function the extension does not export: a runtime error, no new compile.
* ``broken``: a C++ compile error; the source is the same for every task, so it is compiled (and fails) once.
* ``cheat``: ``forward`` is the reference's own PyTorch code; refused by the static checks, never compiled.
* ``prose``: an answer without code: a format error.

The verdicts of each (task, program, evaluation seed) are computed once with the real
:class:`~musaenv.evaluator.local.LocalEvaluator` and stored in a JSON file; :class:`CachedEvaluator` replays them so
a learning loop can run thousands of episodes through the real env in minutes.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from musaenv.config import EvalConfig, TimingConfig
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.tasks.task import Task
from musaenv.types import EvalResult

__all__ = ["POOL_EVAL_CONFIG", "PROGRAMS", "CachedEvaluator", "collect_outcomes", "program_response", "response_key"]

log = logging.getLogger(__name__)

# The default EvalConfig except for time limits and timing effort: on a shared 2-core machine under load a
# ReLU's trials stage once took over the default 60 s, a load artifact we do not want recorded as the program's
# verdict; 10 timed calls (<= 2 s) instead of 20 (<= 5 s) halve the one-off cost. Correctness checks are unchanged.
POOL_EVAL_CONFIG = EvalConfig(
    load_timeout_s=300.0,
    run_timeout_s=300.0,
    timing_timeout_s=300.0,
    timing=TimingConfig(repeats=10, max_time_s=2.0),
)

PROGRAMS = ("fast", "slow", "partial", "wrong", "crash", "broken", "cheat", "prose")

_BROKEN_CPP = r"""
torch::Tensor forward(torch::Tensor x) {
    auto out = torch::empty_like(x)   // missing semicolon: a compile error
    return out;
}
"""

_BROKEN = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{_BROKEN_CPP}"""

ext = load_inline(name="musaenv_pool_broken", cpp_sources=CPP, functions=["forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *args):
        return ext.forward(args[0])
'''

_SUBCLASS = {
    "fast": "",
    "slow": """
class ModelNew(_Kernel):
    def forward(self, *args):
        out = super().forward(*args)
        for _ in range(3):  # the same work again: correct, about 4x slower
            out = super().forward(*args)
        return out
""",
    "partial": """
class ModelNew(_Kernel):
    def forward(self, *args):
        out = super().forward(*args)
        if args[0].shape[0] % 2 == 1:  # a "bug" on odd batch sizes
            return torch.zeros_like(out)
        return out
""",
    "wrong": """
def _shift_rows(a):
    if not isinstance(a, torch.Tensor) or a.dim() == 0 or a.shape[0] < 2:
        return a
    n = a.shape[0]
    b = torch.empty_like(a)
    b.narrow(0, 0, n - 1).copy_(a.narrow(0, 1, n - 1))
    b.narrow(0, n - 1, 1).copy_(a.narrow(0, 0, 1))
    return b


class ModelNew(_Kernel):
    def forward(self, *args):
        return super().forward(*[_shift_rows(a) for a in args])
""",
    "crash": """
class ModelNew(_Kernel):
    def forward(self, *args):
        return ext.forward_fused_v2(*args)  # not exported by the extension: AttributeError
""",
}


def _reference_forward(task: Task) -> str:
    """Source of the reference ``Model.forward`` (PyTorch ops), to paste into a cheating ``ModelNew``."""
    for node in ast.parse(task.source).body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return ast.unparse(item)
    raise ValueError(f"{task.id}: no Model.forward in the reference")


def _reference_imports(task: Task) -> str:
    """The reference's import lines (so the pasted forward finds ``F``, ``math``, ...)."""
    nodes = [n for n in ast.parse(task.source).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(ast.unparse(n) for n in nodes)


def _fence(code: str, note: str) -> str:
    return f"{note}\n\n```python\n{code.rstrip()}\n```\n"


def program_response(task_id: str, program: str) -> str:
    """The response text of ``program`` (one of :data:`PROGRAMS`) for a built-in task with a CPU solution."""
    if program == "prose":
        return "I would write a fused C++ loop for this operator, but I am not sure about the details yet."
    if program == "broken":
        return _fence(_BROKEN, "A first draft of the kernel:")
    solution = solution_source(task_id, "cpu")
    if program == "fast":
        return _fence(solution, "Here is a custom C++ kernel:")
    renamed = solution.replace("class ModelNew(nn.Module):", "class _Kernel(nn.Module):")
    if program == "cheat":
        task = get_task(task_id)
        forward = "\n".join("    " + line for line in _reference_forward(task).splitlines())
        code = _reference_imports(task) + "\n" + renamed + "\n\nclass ModelNew(_Kernel):\n" + forward + "\n"
    else:
        code = renamed + "\n" + _SUBCLASS[program]
    return _fence(code, f"Here is a custom C++ kernel ({program} variant):")


def response_key(task_id: str, response: str) -> str:
    """Cache key of a response on a task: the task id and a hash of the text."""
    return f"{task_id}|{hashlib.sha256(response.encode()).hexdigest()[:16]}"


def collect_outcomes(
    task_ids: list[str], n_seeds: int, cache_path: Path, config: EvalConfig | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Evaluate every (task, program) with the real evaluator for seeds ``0..n_seeds-1``; cached in ``cache_path``.

    Returns:
        ``response_key -> [EvalResult dict per seed]``. Entries already in the cache file are not evaluated again.
    """
    from musaenv.evaluator.local import LocalEvaluator

    cache: dict[str, list[dict[str, Any]]] = {}
    if cache_path.exists():
        cache = json.loads(cache_path.read_text())
    todo = [
        (t, p)
        for t in task_ids
        for p in PROGRAMS
        if len(cache.get(response_key(t, program_response(t, p)), [])) < n_seeds
    ]
    if not todo:
        return cache
    with LocalEvaluator("cpu", config or POOL_EVAL_CONFIG) as ev:
        for task_id, program in todo:
            task = get_task(task_id)
            response = program_response(task_id, program)
            key = response_key(task_id, response)
            runs = cache.setdefault(key, [])
            for seed in range(len(runs), n_seeds):
                start = time.perf_counter()
                result = ev.evaluate(task, response, seed=seed)
                log.info(
                    "%s %s seed %d: %s in %.1f s",
                    task_id,
                    program,
                    seed,
                    result.stage.value,
                    time.perf_counter() - start,
                )
                runs.append(result.to_dict())
                cache_path.parent.mkdir(parents=True, exist_ok=True)
                cache_path.write_text(json.dumps(cache))
    return cache


class CachedEvaluator:
    """Replays recorded verdicts: ``evaluate(task, response, seed)`` returns run ``seed % n`` of that response.

    Satisfies the env's evaluator protocol, so ``KernelGenEnv(evaluator=CachedEvaluator(...))`` runs the real
    episode logic (stop on success, masking, shapers, feedback) without compiling anything.

    Raises:
        KeyError: ``evaluate`` on a response that was never evaluated.
    """

    tier = "cpu"

    def __init__(self, outcomes: dict[str, list[dict[str, Any]]]) -> None:
        self._runs = {k: [EvalResult.from_dict(d) for d in v] for k, v in outcomes.items() if v}

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        """The recorded verdict of ``response`` on ``task`` for this seed."""
        runs = self._runs[response_key(task.id, response)]
        return runs[seed % len(runs)]

    def close(self) -> None:
        """Nothing to release."""
