"""Generations to evaluate: a JSONL file of samples, or a KernelBench generations folder. No torch here.

* JSONL: one object per line, ``{"task": <built-in id or path of a KernelBench-format file>, "response": <the
  model's full text>, "sample": <int>, ...}``. ``sample`` may be left out (samples of a task are then numbered in
  file order); other keys (``model``, ``turn``, ...) are kept in the results. A relative task path is looked up
  from the working directory, then from the JSONL's folder.
* KernelBench folder: files ``level_{L}_problem_{P}_sample_{S}_kernel.py`` (KernelBench's ``generate_samples``
  layout), with ``--tasks`` pointing at a KernelBench checkout (or its ``KernelBench/`` folder), where problem P of
  level L is the file ``level{L}/{P}_<name>.py``. Other files in the folder are ignored.

Both give a problem file the same task: derived shapes (:func:`musaenv.tasks.external.load_external`, so the CPU
tier fits a CPU backend) and its level from the checkout's ``level<N>`` folder. With ``--tasks``, a JSONL's task
paths are also looked up in the checkout, and a file outside a ``level<N>`` folder whose source is one of the
checkout's problems gets that problem's level (else its nearest ``level<N>`` folder, else 1).

Every task is resolved before anything is evaluated, so a typo fails in a second, not after hours.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from musaenv.errors import MusaEnvError, TaskLoadError
from musaenv.tasks.builtin import get_task
from musaenv.tasks.task import Task, level_of, load_task_file

__all__ = ["Sample", "load_generations", "response_digest"]

KERNELBENCH_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_PROBLEM_FILE = re.compile(r"^(\d+)_.*\.py$")


@dataclass(frozen=True)
class Sample:
    """One generation to evaluate.

    Attributes:
        task_key: The task as the input named it (a built-in id, a path, or ``level1/19_ReLU`` for KernelBench).
        task: The resolved :class:`~musaenv.tasks.task.Task`.
        sample: Sample number within the task; ``(task_key, sample)`` is unique.
        response: The model's text (anything that is not a ``str`` becomes a ``format_error``).
        extra: The input row's other keys, copied to the result row.
    """

    task_key: str
    task: Task
    sample: int
    response: Any
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        """Identity of the sample in ``results.jsonl``."""
        return (self.task_key, self.sample)

    @property
    def digest(self) -> str:
        """Identical responses on one task share a digest (and one evaluation)."""
        return response_digest(self.task_key, self.response)


def response_digest(task_key: str, response: Any) -> str:
    """sha256 of the task key and the response (non-strings by their JSON form)."""
    text = response if isinstance(response, str) else json.dumps(response, sort_keys=True)
    return hashlib.sha256(f"{task_key}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()


def load_generations(path: str | Path, tasks_root: str | Path | None = None) -> list[Sample]:
    """Read a JSONL file or a KernelBench generations folder (with ``tasks_root``) into samples.

    Raises:
        MusaEnvError: unreadable input, a row without a task, an unknown task, or a repeated (task, sample).
    """
    p = Path(path)
    if p.is_dir():
        if tasks_root is None:
            raise MusaEnvError(
                f"{p} is a folder: a KernelBench generations folder needs --tasks PATH_TO_KERNELBENCH "
                "(a checkout holding level1/, level2/, ...); for a JSONL file give its path"
            )
        samples = _kernelbench_folder(p, Path(tasks_root))
    elif p.is_file():
        samples = _jsonl(p, None if tasks_root is None else _checkout(Path(tasks_root)))
    else:
        raise MusaEnvError(f"generations not found: {p} is neither a JSONL file nor a folder")
    _check_unique(samples)
    return samples


def _jsonl(path: Path, checkout: Path | None = None) -> list[Sample]:
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise MusaEnvError(f"cannot read {path}: {e}") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise MusaEnvError(f"{path}:{lineno}: not JSON ({e}); expected one object per line") from None
        if not isinstance(row, dict) or not isinstance(row.get("task"), str):
            raise MusaEnvError(f'{path}:{lineno}: expected an object with a "task" string, found {line[:80]!r}')
        rows.append((lineno, row))
    resolved: dict[str, Task] = {}
    numbered: dict[str, int] = {}
    samples = []
    for lineno, row in rows:
        key = row["task"]
        if key not in resolved:
            resolved[key] = _with_checkout_level(_resolve(key, path.parent, f"{path}:{lineno}", checkout), checkout)
        sample = row.get("sample")
        if sample is None:
            sample = numbered.get(key, 0)
        elif not isinstance(sample, int) or isinstance(sample, bool):
            raise MusaEnvError(f'{path}:{lineno}: expected "sample" to be an integer, found {sample!r}')
        numbered[key] = max(numbered.get(key, 0), sample + 1)
        extra = {k: v for k, v in row.items() if k not in ("task", "response", "sample")}
        samples.append(Sample(key, resolved[key], sample, row.get("response"), extra))
    return samples


def _resolve(key: str, base: Path, where: str, checkout: Path | None = None) -> Task:
    """A built-in id, or a KernelBench-format file relative to the working directory, to ``base`` or to the
    KernelBench ``checkout``."""
    target = key
    if not Path(key).is_absolute() and not Path(key).exists():
        target = next((str(b / key) for b in (base, checkout) if b is not None and (b / key).exists()), key)
    try:
        return get_task(target)
    except TaskLoadError as e:
        raise MusaEnvError(f"{where}: task {key!r}: {e}") from None


def _checkout(tasks_root: Path) -> Path:
    """The folder holding ``level1/``... of a KernelBench checkout (or that folder itself)."""
    root = tasks_root / "KernelBench" if (tasks_root / "KernelBench").is_dir() else tasks_root
    if not root.is_dir():
        raise MusaEnvError(f"--tasks {tasks_root}: not a folder (expected a KernelBench checkout with level1/ ...)")
    return root


def _with_checkout_level(task: Task, checkout: Path | None) -> Task:
    """``task`` with the level of the checkout's problem that has its source (a copy outside ``level<N>``)."""
    if checkout is None or not task.path:
        return task
    levels = _checkout_levels(checkout)
    try:  # the file as written: a derived task's source may have its get_inputs literals lifted into names
        text = Path(task.path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = task.source
    level = levels.get(hashlib.sha256(text.encode()).hexdigest())
    return task if level is None or level == task.level else replace(task, level=level)


_LEVELS: dict[Path, dict[str, int]] = {}


def _checkout_levels(checkout: Path) -> dict[str, int]:
    """sha256 of each problem file's source -> its level (``level<N>`` folders of the checkout), read once."""
    if checkout not in _LEVELS:
        found: dict[str, int] = {}
        for f in sorted(checkout.glob("level*/*.py")):
            try:
                found.setdefault(hashlib.sha256(f.read_text(encoding="utf-8").encode()).hexdigest(), level_of(f))
            except (OSError, UnicodeDecodeError):
                continue
        _LEVELS[checkout] = found
    return _LEVELS[checkout]


def _kernelbench_folder(folder: Path, tasks_root: Path) -> list[Sample]:
    root = _checkout(tasks_root)
    found = sorted(
        (tuple(int(g) for g in m.groups()), f)
        for f in folder.iterdir()
        if (m := KERNELBENCH_NAME.match(f.name)) and f.is_file()
    )
    if not found:
        raise MusaEnvError(f"{folder}: no files named level_<L>_problem_<P>_sample_<S>_kernel.py")
    problems: dict[tuple[int, int], Task] = {}
    samples = []
    for (level, problem, sample), f in found:
        if (level, problem) not in problems:
            problems[(level, problem)] = _kernelbench_problem(root, level, problem)
        task = problems[(level, problem)]
        try:
            response = f.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise MusaEnvError(f"cannot read {f}: {e}") from None
        samples.append(Sample(task.id, task, sample, response, {"file": f.name, "problem": problem}))
    return samples


def _kernelbench_problem(root: Path, level: int, problem: int) -> Task:
    level_dir = root / f"level{level}"
    matches = [f for f in sorted(level_dir.glob("*.py")) if (m := _PROBLEM_FILE.match(f.name)) and int(m[1]) == problem]
    if len(matches) != 1:
        found = "none" if not matches else ", ".join(f.name for f in matches)
        raise MusaEnvError(
            f"level {level} problem {problem}: expected one file {level_dir}/{problem}_<name>.py, found {found}"
        )
    try:  # derived shapes, as a JSONL row naming the same file gets (get_task)
        from musaenv.tasks.external import derive_task

        return derive_task(load_task_file(matches[0], task_id=f"level{level}/{matches[0].stem}", level=level))
    except TaskLoadError as e:
        raise MusaEnvError(str(e)) from None


def _check_unique(samples: list[Sample]) -> None:
    seen: set[tuple[str, int]] = set()
    for s in samples:
        if s.key in seen:
            raise MusaEnvError(
                f"task {s.task_key!r} has sample {s.sample} twice; give each generation of a task its own "
                '"sample" number (or leave "sample" out everywhere to number them in file order)'
            )
        seen.add(s.key)
