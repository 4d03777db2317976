"""The :class:`Task` record and loaders for KernelBench-format files. No torch here.

A KernelBench-format file defines ``class Model(nn.Module)``, module-level ``get_inputs()`` and
``get_init_inputs()``, and its size constants as module globals. A task's *shapes* are overrides of
those globals: the harness sets them on the loaded module before calling ``get_inputs()``, so one
reference program serves several input shapes and size tiers.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.errors import TaskLoadError

__all__ = [
    "DEFAULT_TOLERANCES",
    "Shape",
    "Task",
    "level_of",
    "load_task_dir",
    "load_task_file",
    "size_globals",
    "tier_order",
]

Shape = dict[str, Any]
"""Overrides of module-level size constants, e.g. ``{"batch_size": 16, "dim": 1024}``."""

# Per-dtype (atol, rtol). fp32 1e-4 and half types 1e-2 follow KernelBench's evaluation protocol.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-4),
    "float64": (1e-7, 1e-7),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}

_LEVEL_RE = re.compile(r"level[_-]?(\d)", re.IGNORECASE)
_LEVEL_DIR = re.compile(r"level[_-]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Task:
    """One kernel-writing problem.

    Attributes:
        id: Unique id (built-in ids look like ``l1_relu``).
        level: KernelBench level: 1 single op, 2 fused chain, 3 small network.
        source: The reference program (KernelBench file format).
        name: Human-readable name.
        description: One sentence on what the reference computes.
        dtype: Dtype of the floating inputs (``float32``, ``float16``, ``bfloat16``).
        atol: Absolute tolerance for the correctness check.
        rtol: Relative tolerance for the correctness check.
        shapes: Size tier (``cpu``, ``gpu``, ``interp`` for Triton's CPU interpreter) -> shapes; the first shape
            of a tier is the timing shape, all are used for correctness. An empty shape ``{}`` means "the file's
            own globals".
        path: File the task was loaded from, if any.
        warnings: Flags about how strongly the task can be checked, e.g. ``single_shape`` (a tier with one shape:
            the file's sizes could not be varied); set by shape derivation (:mod:`musaenv.tasks.derive`).
        footprint_bytes: Tier -> per shape, the bytes of one reference call's inputs, outputs and parameters,
            measured on the ``meta`` device by derivation (``None``: unknown). Empty when not derived.
        notes: Why derivation flagged what it flagged, in sentences (e.g. the error that left a file
            ``not_derived``); empty when not derived.
    """

    id: str
    level: int
    source: str
    name: str = ""
    description: str = ""
    dtype: str = "float32"
    atol: float = 1e-4
    rtol: float = 1e-4
    shapes: dict[str, tuple[Shape, ...]] = field(default_factory=lambda: {"cpu": ({},), "gpu": ({},)})
    path: str | None = None
    warnings: tuple[str, ...] = ()
    footprint_bytes: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def shapes_for(self, tier: str) -> tuple[Shape, ...]:
        """Shapes of a tier (``cpu``, ``gpu`` or ``interp``); falls back along :func:`tier_order`, then to the
        file's globals."""
        for t in tier_order(tier):
            if self.shapes.get(t):
                return self.shapes[t]
        return ({},)

    def tier_used(self, tier: str) -> str | None:
        """The tier whose shapes :meth:`shapes_for` gives for ``tier`` (``None``: the file's globals)."""
        return next((t for t in tier_order(tier) if self.shapes.get(t)), None)

    @property
    def source_hash(self) -> str:
        """sha256 of the reference source and shapes (keys caches of reference timings)."""
        h = hashlib.sha256(self.source.encode())
        h.update(repr(sorted((k, [sorted(s.items()) for s in v]) for k, v in self.shapes.items())).encode())
        return h.hexdigest()

    def render_source(self, shape: Shape | None = None) -> str:
        """The reference source with the module-level size constants of ``shape`` substituted.

        This is what the policy is shown: exactly the program that the timing shape runs.
        """
        from musaenv.tasks.constants import render

        return render(self.source, shape or {})

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary (no source) for listings."""
        return {
            "id": self.id,
            "level": self.level,
            "name": self.name,
            "description": self.description,
            "dtype": self.dtype,
            "atol": self.atol,
            "rtol": self.rtol,
            "shapes": {k: [dict(s) for s in v] for k, v in self.shapes.items()},
            "path": self.path,
            "warnings": list(self.warnings),
        }


def tier_order(tier: str) -> tuple[str, ...]:
    """Tiers tried for ``tier``, best first: ``interp`` (Triton's CPU interpreter; derived files only) falls back to
    the cpu tier, the cpu and gpu tiers to each other."""
    return {"interp": ("interp", "cpu", "gpu"), "cpu": ("cpu", "gpu")}.get(tier, (tier, "cpu"))


def _global_assignments(source: str) -> dict[str, tuple[int, int]]:
    """Module-level ``NAME = <number>`` assignments -> (line number, end column of the value)."""
    out: dict[str, tuple[int, int]] = {}
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, (int, float))
            and not isinstance(node.value.value, bool)
            and node.lineno == node.end_lineno
        ):
            out[node.targets[0].id] = (node.lineno, node.value.end_col_offset or 0)
    return out


def size_globals(source: str) -> dict[str, int | float]:
    """The module-level numeric constants of a reference program (its default shape)."""
    tree = ast.parse(source)
    names = _global_assignments(source)
    values: dict[str, int | float] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names:
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            if isinstance(value, (int, float)):
                values[node.targets[0].id] = value
    return values


def _check_reference(path: str, source: str) -> ast.Module:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise TaskLoadError(path, f"not valid Python: {e.msg} (line {e.lineno})") from None
    top = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in top]
    if missing:
        raise TaskLoadError(
            path,
            f"a KernelBench-format file defines class Model, get_inputs() and get_init_inputs() at module "
            f"level; missing: {', '.join(missing)}",
        )
    return tree


def _guess_dtype(source: str) -> str:
    for name in ("bfloat16", "float16", "half"):
        if f"torch.{name}" in source:
            return "float16" if name == "half" else name
    return "float32"


def level_of(path: str | Path) -> int:
    """The KernelBench level of a file: its nearest ``level<N>`` folder (``runs/level3_x/KernelBench/level1/19.py``
    is level 1), else any ``level<N>`` in its folder's path, else 1."""
    parent = Path(path).parent
    for part in reversed(parent.parts):
        m = _LEVEL_DIR.fullmatch(part)
        if m:
            return int(m.group(1))
    m = _LEVEL_RE.search(str(parent))
    return int(m.group(1)) if m else 1


def load_task_file(path: str | Path, task_id: str | None = None, level: int | None = None) -> Task:
    """Load one KernelBench-format ``.py`` file as a :class:`Task`.

    The level is taken from a ``level<N>`` folder in the path when not given (default 1); the dtype is
    guessed from the source, and the tolerance follows the dtype. The task has the file's own sizes as its only
    shape; :func:`musaenv.tasks.external.load_external` (what ``get_task`` and the env use) derives its tiers.

    Raises:
        TaskLoadError: the file is missing, unreadable, not Python, or lacks Model/get_inputs/get_init_inputs.
    """
    p = Path(path)
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskLoadError(str(p), f"cannot read it: {e}") from None
    _check_reference(str(p), source)
    if level is None:
        level = level_of(p)
    dtype = _guess_dtype(source)
    atol, rtol = DEFAULT_TOLERANCES[dtype]
    return Task(
        id=task_id or f"file:{p.stem}",
        level=level,
        source=source,
        name=p.stem,
        dtype=dtype,
        atol=atol,
        rtol=rtol,
        path=str(p),
    )


def load_task_dir(path: str | Path) -> list[Task]:
    """Load every ``*.py`` file under a directory (e.g. a KernelBench checkout's ``level1`` .. ``level3``).

    Files that are not KernelBench programs raise :class:`TaskLoadError` naming the file.
    Task ids are ``<level folder>/<file stem>`` relative to ``path``. Shapes are the files' own; for derived
    tiers use :func:`musaenv.tasks.external.load_suite`.
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskLoadError(str(root), "not a directory")
    tasks = []
    for f in sorted(root.rglob("*.py")):
        if f.name == "__init__.py":
            continue
        rel = f.relative_to(root).with_suffix("")
        tasks.append(load_task_file(f, task_id=str(rel).replace("\\", "/")))
    return tasks
