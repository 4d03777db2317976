"""Task prompts as dataset rows, for data-driven trainers (TRL, verifiers, SkyRL) and ``musaenv dataset``.

One row per task (times ``repeats``); for chat trainers (``trainer="chat"``: SkyRL, verifiers)::

    {"prompt": [{"role": "user", "content": <the KernelGen-v0 first observation>}],
     "task": "l1_relu", "level": 1, "env": "KernelGen-v0", "env_class": "musaenv", "backend": "cpu"}

``prompt`` is what the env shows at reset, as chat messages; ``task`` is what the env's ``reset(options=...)``
(and every adapter's ``reset``) reads to pick the task; ``env`` is the Gymnasium id and ``env_class`` the name the
SkyRL-gym registration uses (see :mod:`musaenv.rl.adapters.skyrl`); ``max_turns``, when asked for, is the turn
limit SkyRL hands the env. For TRL (``trainer="trl"``) the prompt is instead a short instruction to call the
``submit_kernel`` tool: TRL appends the env's ``reset()`` answer, the task prompt in its tool form, to that message
(:mod:`musaenv.rl.adapters.trl`), so the task prompt is read once and asks for what the tool schema takes.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from musaenv.backends import REGISTRY, get_backend
from musaenv.errors import MusaEnvError

__all__ = ["add_dataset_subparser", "dataset_rows", "write_dataset"]

FORMATS = ("jsonl", "parquet")
TRAINERS = ("chat", "trl")


def _tier(backend: str) -> str:
    return get_backend(backend).tier


def dataset_rows(
    tasks: Sequence[str] | None = None,
    level: int | None = None,
    backend: str = "cpu",
    repeats: int = 1,
    system: str | None = None,
    max_turns: int | None = None,
    trainer: str = "chat",
) -> list[dict[str, Any]]:
    """Rows of the task prompts (see the module docstring).

    Args:
        tasks: Task ids or KernelBench files; ``None``: the built-in suite (``level`` filters it).
        level: Only built-in tasks of this level (ignored when ``tasks`` is given).
        backend: Backend the prompt is written for (``cpu``, ``cuda``, ``triton``, ``musa``).
        repeats: Copies of each row (GRPO-style datasets repeat prompts).
        system: Optional system message put before the task prompt.
        max_turns: Turn limit written as the row's ``max_turns`` column (SkyRL passes it to the env in ``extras``
            and musaenv's SkyRL env honours it); ``None`` writes no column.
        trainer: ``chat`` (SkyRL, verifiers, any trainer that shows the row's prompt and parses a fenced block):
            the prompt is the task prompt; ``trl`` (TRL's ``environment_factory``): the prompt is a short
            instruction to call ``submit_kernel``, and the env's ``reset`` appends the task prompt once.

    Raises:
        MusaEnvError: an unknown ``trainer``.
    """
    from musaenv.tasks.builtin import builtin_tasks, get_task
    from musaenv.tasks.prompts import initial_prompt, tool_instruction

    if trainer not in TRAINERS:
        raise MusaEnvError(f"trainer must be one of {TRAINERS}, found {trainer!r}")
    chosen = [get_task(t) for t in tasks] if tasks else builtin_tasks(level=level)
    rows: list[dict[str, Any]] = []
    for task in chosen:
        messages = [{"role": "system", "content": system}] if system else []
        if trainer == "trl":  # TRL appends reset()'s task prompt (tool form) to this message: not here as well
            messages.append({"role": "user", "content": tool_instruction()})
        else:
            messages.append({"role": "user", "content": initial_prompt(task, get_backend(backend), _tier(backend))})
        row = {"prompt": messages, "task": task.id, "level": task.level, "env": "KernelGen-v0",
               "env_class": "musaenv", "backend": backend}  # fmt: skip
        if max_turns is not None:
            row["max_turns"] = max_turns
        rows.extend(dict(row) for _ in range(repeats))
    return rows


def write_dataset(rows: Sequence[dict[str, Any]], path: str | Path, fmt: str = "jsonl") -> Path:
    """Write rows as JSON lines or Parquet (needs ``pyarrow``); returns the path.

    Raises:
        MusaEnvError: an unknown format, or Parquet without pyarrow installed.
    """
    path = Path(path)
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path
    if fmt != "parquet":
        raise MusaEnvError(f"dataset format must be one of {FORMATS}, found {fmt!r}")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MusaEnvError("--format parquet needs pyarrow: pip install pyarrow (or use --format jsonl)") from None
    pq.write_table(pa.Table.from_pylist(list(rows)), path)
    return path


def _cmd_dataset(args: argparse.Namespace) -> int:
    tasks = [t for t in args.tasks.split(",") if t] if args.tasks else None
    rows = dataset_rows(tasks, level=args.level, backend=args.backend, repeats=args.repeats, system=args.system,
                        max_turns=args.max_turns, trainer=args.trainer)  # fmt: skip
    out = args.output or f"musaenv_tasks.{args.format}"
    write_dataset(rows, out, args.format)
    print(f"wrote {len(rows)} rows to {out}")
    return 0


def add_dataset_subparser(sub: Any) -> None:
    """Register ``musaenv dataset`` on the CLI's subparsers."""
    d = sub.add_parser("dataset", help="export task prompts as dataset rows (jsonl or parquet)")
    d.add_argument("--format", choices=FORMATS, default="jsonl")
    d.add_argument("--output", "-o", default=None, help="file to write (default musaenv_tasks.<format>)")
    d.add_argument("--tasks", default=None, help="comma-separated task ids or files (default: the built-in suite)")
    d.add_argument("--level", type=int, choices=[1, 2, 3], default=None)
    d.add_argument("--backend", default="cpu", choices=list(REGISTRY))
    d.add_argument("--repeats", type=int, default=1)
    d.add_argument("--system", default=None, help="system message before each task prompt")
    d.add_argument("--max-turns", type=int, default=None, help="write a max_turns column (SkyRL's turn limit)")
    d.add_argument("--trainer", choices=TRAINERS, default="chat",
                   help="chat: the row's prompt is the task prompt (SkyRL, verifiers); trl: TRL environment_factory "
                        "rows (an instruction to call submit_kernel; reset() adds the task prompt)")  # fmt: skip
    d.set_defaults(func=_cmd_dataset)
