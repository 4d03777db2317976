"""The built-in task suite: KernelBench-format files under ``tasks/suite/`` listed in ``manifest.json``.

Manifest entry (one per task)::

    {"id": "l1_relu", "file": "level1/relu.py", "level": 1, "name": "ReLU",
     "description": "...", "dtype": "float32",
     "shapes": {"cpu": [{"batch_size": 16, "dim": 4096}, {"batch_size": 7, "dim": 1001}],
                "gpu": [{"batch_size": 4096, "dim": 16384}, {"batch_size": 1023, "dim": 8191}]}}

Reference solutions live in ``tasks/solutions/<backend>/<task id>.py``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from musaenv.errors import TaskLoadError
from musaenv.tasks.task import DEFAULT_TOLERANCES, Task, load_task_file

__all__ = ["SUITE_DIR", "builtin_tasks", "get_task", "solution_path", "solution_source", "solved_task_ids"]

SUITE_DIR = Path(__file__).parent / "suite"
SOLUTIONS_DIR = Path(__file__).parent / "solutions"


@functools.lru_cache(maxsize=1)
def _load_suite() -> tuple[Task, ...]:
    manifest_path = SUITE_DIR / "manifest.json"
    try:
        entries = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as e:
        raise TaskLoadError(str(manifest_path), f"built-in manifest unreadable: {e}") from None
    tasks: list[Task] = []
    for entry in entries:
        tasks.append(_task_from_entry(entry))
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise TaskLoadError(str(manifest_path), "duplicate task ids")
    return tuple(tasks)


def _task_from_entry(e: dict[str, Any]) -> Task:
    path = SUITE_DIR / e["file"]
    base = load_task_file(path, task_id=e["id"], level=int(e["level"]))
    dtype = e.get("dtype", base.dtype)
    atol, rtol = DEFAULT_TOLERANCES[dtype]
    shapes = {tier: tuple(dict(s) for s in ss) for tier, ss in e.get("shapes", {}).items()}
    return Task(
        id=e["id"],
        level=int(e["level"]),
        source=base.source,
        name=e.get("name", base.name),
        description=e.get("description", ""),
        dtype=dtype,
        atol=float(e.get("atol", atol)),
        rtol=float(e.get("rtol", rtol)),
        shapes=shapes or base.shapes,
        path=str(path),
    )


def builtin_tasks(level: int | None = None) -> list[Task]:
    """All built-in tasks, optionally only one level, in manifest order."""
    return [t for t in _load_suite() if level is None or t.level == level]


def get_task(task: str | Task) -> Task:
    """Resolve a built-in id or the path of a KernelBench-format file to a :class:`Task`.

    A file gets derived tiers (:func:`musaenv.tasks.external.load_external`: cached, runs its reference once).

    Raises:
        TaskLoadError: neither a known id nor a loadable file.
    """
    if isinstance(task, Task):
        return task
    for t in _load_suite():
        if t.id == task:
            return t
    p = Path(task)
    if p.suffix == ".py" or p.exists():
        from musaenv.tasks.external import load_external

        return load_external(p)
    known = ", ".join(t.id for t in _load_suite()[:8])
    raise TaskLoadError(task, f"not a built-in task id (e.g. {known}, ...; see `musaenv tasks`) nor an existing file")


def solution_path(task_id: str, backend: str = "cpu") -> Path | None:
    """Path of the shipped reference solution of a built-in task for a backend, if there is one."""
    p = SOLUTIONS_DIR / backend / f"{task_id}.py"
    return p if p.exists() else None


def solution_source(task_id: str, backend: str = "cpu") -> str:
    """Source of the shipped reference solution.

    Raises:
        TaskLoadError: no solution ships for that task and backend.
    """
    p = solution_path(task_id, backend)
    if p is None:
        raise TaskLoadError(str(SOLUTIONS_DIR / backend / f"{task_id}.py"), "no reference solution for this task")
    return p.read_text()


def solved_task_ids(backend: str = "cpu") -> list[str]:
    """Ids of built-in tasks with a shipped solution for ``backend``, in suite order."""
    return [t.id for t in _load_suite() if solution_path(t.id, backend) is not None]
