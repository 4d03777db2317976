"""Tasks users bring: KernelBench-format files and folders, with derived, cached shapes per tier. No torch.

* :func:`derive_task`: a loaded file's tiers from :func:`musaenv.tasks.derive.derive_shapes`, cached on disk
  under ``<cache>/shapes`` by a hash of the source, the budgets and the torch version, so a folder is derived
  once per machine and loads in seconds afterwards.
* :func:`load_suite`: a folder (e.g. a KernelBench checkout's ``KernelBench``) as a list of derived tasks.
* :func:`check_memory`: the memory guard: a tier whose reference calls would not fit the worker's address
  space is a usage error before any input is drawn.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from musaenv import _env
from musaenv.errors import ConfigError, TaskLoadError
from musaenv.tasks.constants import read_constants
from musaenv.tasks.derive import Derivation, ShapeConfig, derive_shapes
from musaenv.tasks.probe import ProbeClient
from musaenv.tasks.task import Task, load_task_file, tier_order

__all__ = ["DERIVE_VERSION", "check_memory", "derive_task", "listing", "load_external", "load_suite"]

log = logging.getLogger(__name__)

DERIVE_VERSION = 5  # bump when derivation rules change: cached derivations of older rules are not reused


def _cache_key(source: str, config: ShapeConfig) -> str:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    h = hashlib.sha256(f"{DERIVE_VERSION}|{torch_version}|{config.to_json()}|".encode())
    h.update(source.encode())
    return h.hexdigest()


def _cache_path(key: str) -> Path:
    return _env.cache_dir() / "shapes" / key[:2] / f"{key}.json"


def _read_cached(key: str) -> Derivation | None:
    path = _cache_path(key)
    try:
        data = json.loads(path.read_text())
        if data.get("key") != key:
            return None
        return Derivation.from_dict(data["derivation"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: derived again


def _write_cached(key: str, derivation: Derivation) -> None:
    path = _cache_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "derivation": derivation.to_dict()}, f)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("cannot cache the shapes of a task at %s: %s", path, e)


def derivation_for(source: str, config: ShapeConfig | None = None, client: ProbeClient | None = None) -> Derivation:
    """The (cached) derivation of one program."""
    cfg = config or ShapeConfig()
    key = _cache_key(source, cfg)
    cached = _read_cached(key)
    if cached is not None:
        return cached
    derivation = derive_shapes(source, cfg, client)
    machine_failed = "not_derived" in derivation.warnings and "worker" in " ".join(derivation.notes)
    if not machine_failed:  # a probe worker that died or hung is this machine's problem: derived again next time
        _write_cached(key, derivation)
    return derivation


def _apply(task: Task, d: Derivation) -> Task:
    if d.source is not None:  # its get_inputs literals lifted into names: the program the shapes set
        task = replace(task, source=d.source)
    consts = read_constants(task.source)
    shapes = {tier: tuple(consts.normalise(s) for s in ss) for tier, ss in d.shapes.items() if ss}
    footprint = {
        tier: tuple(
            None
            if i.get("input_bytes") is None
            else int(i["input_bytes"] + (i["output_bytes"] or 0)) + int(i.get("state_bytes") or 0)
            for i in infos
        )
        for tier, infos in d.info.items()
    }
    return replace(
        task, shapes=shapes or task.shapes, warnings=tuple(d.warnings), footprint_bytes=footprint, notes=tuple(d.notes)
    )


def derive_task(task: Task, config: ShapeConfig | None = None, client: ProbeClient | None = None) -> Task:
    """``task`` with derived tiers, warnings and footprints (cached; see :mod:`musaenv.tasks.derive`)."""
    return _apply(task, derivation_for(task.source, config, client))


def load_external(path: str | Path, config: ShapeConfig | None = None) -> Task:
    """Load one KernelBench-format file and derive its tiers.

    Raises:
        TaskLoadError: the file cannot be loaded (see :func:`musaenv.tasks.task.load_task_file`).
    """
    return derive_task(load_task_file(path), config)


def _files(root: Path) -> list[Path]:
    return [f for f in sorted(root.rglob("*.py")) if f.name != "__init__.py"]


def load_suite(
    path: str | Path,
    levels: Iterable[int] | None = None,
    config: ShapeConfig | None = None,
    derive: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    starting: Callable[[int, int, str], None] | None = None,
) -> list[Task]:
    """A folder of KernelBench-format files as tasks (ids ``<level folder>/<file stem>``), optionally derived.

    Args:
        path: The folder (searched recursively; ``__init__.py`` skipped).
        levels: Keep only these levels (from ``level<N>`` folder names).
        config: Derivation budgets.
        derive: Derive tiers now (one probe worker for the whole folder; cached per file).
        progress: Called with (done, total, task id) after each file.
        starting: Called with (done, total, task id) before each file's derivation (what is running now; a cold
            derivation takes seconds to minutes).

    Raises:
        TaskLoadError: not a directory, a file that is not a KernelBench program, or nothing selected.
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskLoadError(str(root), "not a directory")
    wanted = None if levels is None else {int(x) for x in levels}
    tasks = []
    for f in _files(root):
        task_id = str(f.relative_to(root).with_suffix("")).replace("\\", "/")
        task = load_task_file(f, task_id=task_id)
        if wanted is None or task.level in wanted:
            tasks.append(task)
    if not tasks:
        raise TaskLoadError(str(root), f"no KernelBench-format file of levels {sorted(wanted or [])} under it")
    if not derive:
        return tasks
    out = []
    with ProbeClient((config or ShapeConfig()).probe_memory_mb) as client:
        for i, task in enumerate(tasks, start=1):
            if starting is not None:
                starting(i - 1, len(tasks), task.id)
            out.append(derive_task(task, config, client))
            if progress is not None:
                progress(i, len(tasks), task.id)
    return out


def listing(task: Task) -> dict[str, Any]:
    """The ``musaenv tasks --dir --json`` entry of a task: id, level, dtype, tolerances, shapes, warnings and the
    notes saying why (a ``not_derived`` file's error)."""
    return {
        "id": task.id,
        "level": task.level,
        "name": task.name,
        "dtype": task.dtype,
        "atol": task.atol,
        "rtol": task.rtol,
        "shapes": {tier: [dict(s) for s in shapes] for tier, shapes in task.shapes.items()},
        "footprint_bytes": {tier: list(v) for tier, v in task.footprint_bytes.items()},
        "warnings": list(task.warnings),
        "notes": list(task.notes),
        "path": task.path,
    }


def check_memory(task: Task, tier: str, limit_mb: int, copies: int = 1) -> None:
    """Refuse a tier whose reference calls would not fit the worker's memory, before anything is drawn.

    Args:
        task: A derived task (tasks without footprints, such as the built-in suite, pass).
        tier: ``cpu``, ``gpu`` or ``interp``.
        limit_mb: The worker's address-space limit (``SandboxConfig.address_space_mb``; 0 = unlimited).
        copies: Input sets held at once (the cpu tier draws trials and the timing pool ahead).

    Raises:
        ConfigError: naming the task, the bytes and the settings to change.
    """
    if not limit_mb:
        return
    sizes = next((task.footprint_bytes[t] for t in tier_order(tier) if task.footprint_bytes.get(t)), ())
    known = [b for b in sizes if b is not None]
    if not known:
        return
    need = max(known) * max(1, copies)
    if need > limit_mb << 20:
        raise ConfigError(
            f"task {task.id!r}, tier {tier!r}: one evaluation holds about {need:,} bytes of inputs, outputs and "
            f"parameters ({max(known):,} per call, {copies} sets), more than the worker's address space limit of "
            f"{limit_mb << 20:,} bytes. Raise EvalConfig.sandbox.address_space_mb (0 = unlimited), pick the cpu tier "
            "(add --tier cpu to musaenv eval/bench; EvalConfig(tier='cpu') in code; sizes derived to fit "
            "ShapeConfig.cpu_bytes), or lower the file's sizes."
        )
