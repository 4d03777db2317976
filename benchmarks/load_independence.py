"""Load independence: the same honest candidates evaluated on an idle machine and on one saturated by busy loops.

Every shipped CPU solution (or ``--tasks``) is evaluated twice in one run, side by side: once with nothing else
running, once beside ``--per-core`` busy loops per core (separate processes at the default priority). A verifier
whose limits measured the host would turn some honest verdicts into ``timeout`` or ``compile_error`` under load;
the target is no change. ``infra_error`` (a wall-clock backstop that alone ran out) is retried by the pool and
counted separately. Reports the verdicts of both runs, the change rate, and the evaluation times.

Usage: ``python benchmarks/load_independence.py [--tasks l1_relu,l1_add] [--per-core 2] [--out out/load.json]``.
The CI test ``tests/integration/test_load.py`` runs :func:`compare` on three tasks.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.pool import EvaluatorPool
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids

CONFIG = EvalConfig(num_trials=3, timing=TimingConfig(warmup=1, repeats=5, max_time_s=0.5))


def _spin() -> None:
    while True:
        pass


@contextmanager
def saturated(per_core: int) -> Iterator[int]:
    """``per_core`` busy-loop processes per usable core while the block runs; yields how many were started."""
    n = per_core * len(os.sched_getaffinity(0))
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.join()


def _evaluate(pool: EvaluatorPool, task_ids: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for tid in task_ids:
        t0 = time.monotonic()
        r = pool.submit(get_task(tid), solution_source(tid, "cpu"), seed=5).result()
        out.append({"task": tid, "stage": r.stage.value, "retries": r.extra.get("retries", 0),
                    "seconds": round(time.monotonic() - t0, 2), "messages": list(r.messages[:2])})  # fmt: skip
    return out


def compare(task_ids: Sequence[str], per_core: int = 2) -> dict[str, Any]:
    """Evaluate ``task_ids``' shipped solutions idle, then saturated; returns both runs and the change rate."""
    with EvaluatorPool("cpu", CONFIG, compile_workers=1, max_in_flight=1) as pool:
        _evaluate(pool, task_ids[:1])  # warm: the pool's processes start outside both measurements
        idle = _evaluate(pool, task_ids)
        with saturated(per_core) as loops:
            busy = _evaluate(pool, task_ids)
    changed = [a["task"] for a, b in zip(idle, busy) if a["stage"] != b["stage"]]
    return {
        "tasks": list(task_ids), "busy_loops": loops, "idle": idle, "saturated": busy,
        "changed": changed, "change_rate": len(changed) / max(1, len(task_ids)),
        "idle_s": round(sum(r["seconds"] for r in idle), 1), "saturated_s": round(sum(r["seconds"] for r in busy), 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point: run both passes, print them side by side, write JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="", help="comma-separated task ids (default: every shipped CPU solution)")
    p.add_argument("--per-core", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("out/load_independence.json"))
    a = p.parse_args(argv)
    tasks = [t for t in a.tasks.split(",") if t] or list(solved_task_ids("cpu"))
    report = compare(tasks, a.per_core)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2))
    print(f"{'task':<26} {'idle':<14} {'s':>6}   {'saturated':<14} {'s':>6}")
    for i, s in zip(report["idle"], report["saturated"]):
        print(f"{i['task']:<26} {i['stage']:<14} {i['seconds']:>6}   {s['stage']:<14} {s['seconds']:>6}")
    print(f"busy loops: {report['busy_loops']}  verdict change rate: {report['change_rate']:.3f} {report['changed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
