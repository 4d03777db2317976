"""How long does each built-in task's reference forward take at its CPU-tier shapes, on one thread?

The CPU tier is sized so that a reference forward on the timing shape (the tier's first shape) takes well
under ~20 ms on one thread; this script measures that, prints a table and writes JSON. It never asserts.

Usage (from the repository root, with musaenv installed or ``PYTHONPATH=.``)::

    python benchmarks/suite_reference_times.py [--out out/suite_reference_times.json] [--repeats 21] [--level 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from musaenv.tasks.builtin import builtin_tasks, solved_task_ids
from musaenv.tasks.task import Shape, Task


@dataclass
class TaskTiming:
    """Reference forward times of one task at one CPU-tier shape."""

    id: str
    level: int
    shape_index: int
    shape: Shape
    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    has_cpu_solution: bool


def _reference(task: Task, shape: Shape) -> tuple[torch.nn.Module, list[Any]]:
    """Build the reference model and inputs exactly as the program shown for ``shape`` would."""
    module = types.ModuleType(f"ref_{task.id}")
    exec(compile(task.render_source(shape), task.path or task.id, "exec"), module.__dict__)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(1)
    return model, list(module.get_inputs())


def time_task(task: Task, shape_index: int, repeats: int, warmup: int, solved: set[str]) -> TaskTiming:
    """Median wall time of ``repeats`` reference forwards (after ``warmup`` untimed ones), in ms."""
    shape = task.shapes_for("cpu")[shape_index]
    model, inputs = _reference(task, shape)
    times_ms = []
    with torch.no_grad():
        for i in range(warmup + repeats):
            start = time.perf_counter()
            model(*inputs)
            elapsed_ms = (time.perf_counter() - start) * 1e3
            if i >= warmup:
                times_ms.append(elapsed_ms)
    return TaskTiming(
        id=task.id,
        level=task.level,
        shape_index=shape_index,
        shape=dict(shape),
        median_ms=statistics.median(times_ms),
        min_ms=min(times_ms),
        max_ms=max(times_ms),
        repeats=repeats,
        has_cpu_solution=task.id in solved,
    )


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("out/suite_reference_times.json"), help="JSON output path")
    p.add_argument("--repeats", type=int, default=21, help="timed forwards per task and shape")
    p.add_argument("--warmup", type=int, default=3, help="untimed forwards before timing")
    p.add_argument("--level", type=int, choices=(1, 2, 3), default=None, help="only this level")
    p.add_argument("--all-shapes", action="store_true", help="also time the second (odd) CPU shape")
    return p.parse_args()


def main() -> None:
    args = _parse_args()
    torch.set_num_threads(1)
    solved = set(solved_task_ids("cpu"))
    shape_indices = (0, 1) if args.all_shapes else (0,)
    rows: list[TaskTiming] = []
    print(f"{'task':30s} {'shape':>5s} {'median ms':>10s} {'min ms':>8s} {'max ms':>8s}  solution")
    for task in builtin_tasks(args.level):
        for si in shape_indices:
            r = time_task(task, si, args.repeats, args.warmup, solved)
            rows.append(r)
            mark = "yes" if r.has_cpu_solution else ""
            print(f"{r.id:30s} {si:5d} {r.median_ms:10.3f} {r.min_ms:8.3f} {r.max_ms:8.3f}  {mark}", flush=True)
    timing_medians = [r.median_ms for r in rows if r.shape_index == 0]
    summary = {
        "tasks": len(timing_medians),
        "min_ms": min(timing_medians),
        "median_ms": statistics.median(timing_medians),
        "max_ms": max(timing_medians),
        "over_20ms": [r.id for r in rows if r.shape_index == 0 and r.median_ms > 20.0],
    }
    print(
        f"\ntiming shape, one thread: min {summary['min_ms']:.3f} ms, median {summary['median_ms']:.3f} ms, "
        f"max {summary['max_ms']:.3f} ms over {summary['tasks']} tasks; over 20 ms: {summary['over_20ms'] or 'none'}"
    )
    payload = {
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "num_threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "summary": summary,
        "timings": [asdict(r) for r in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
