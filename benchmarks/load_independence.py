"""Load independence: the same honest candidates evaluated on an idle machine and on one saturated by busy loops.

Verdicts (default): every shipped CPU solution (or ``--tasks``) is evaluated twice in one run, side by side: once
with nothing else running, once beside ``--per-core`` busy loops per core (separate processes at the default
priority). A verifier whose limits measured the host would turn some honest verdicts into ``timeout`` or
``compile_error`` under load; the target is no change. ``infra_error`` (a wall-clock backstop that alone ran out)
is retried by the pool and counted separately. Reports the verdicts of both runs, the change rate, and the times.

Speedups (``--speedups``): honest kernels from fast to slow relative to their reference, evaluated ``--evals``
times each idle and beside 2 and 4 busy loops per core, the load levels interleaved round by round in one run,
under each timing mode of ``--modes`` (``paired``, the default, and ``dedicated_host``, the cached reference time).
Targets (issue 26): per task the median speedup under load within +-10 % of the idle one, s(c) within 0.1 of the
idle median in >= 95 % of the loaded evaluations, and the fast_1.0 decision (median speedup > 1) unchanged.

Usage: ``python benchmarks/load_independence.py [--tasks l1_relu,l1_add] [--per-core 2] [--out out/load.json]``;
``python benchmarks/load_independence.py --speedups [--evals 5] [--modes paired,dedicated_host]``; a mode may name
the workers' allocator after a colon (``--modes paired,paired:system``: ``TimingConfig.allocator``).
The CI test ``tests/integration/test_load.py`` runs :func:`compare` on three tasks.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.pool import EvaluatorPool
from musaenv.rewards.score import candidate_score
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids

CONFIG = EvalConfig(num_trials=3, timing=TimingConfig(warmup=1, repeats=5, max_time_s=0.5))
SPEEDUP_TIMING = TimingConfig(warmup=2, repeats=21, max_time_s=3.0)
# Honest kernels, from faster than their reference to much slower (speedups measured idle, here): every shipped CPU
# solution is slower than its torch reference, so two fused elementwise chains (benchmarks/fused/, one pass where the
# reference makes two or five) give the faster end, where s(c) and fast_1.0 can move at all.
FUSED_DIR = Path(__file__).parent / "fused"
SPEEDUP_TASKS = [
    str(FUSED_DIR / "affine_relu_chain.py"), str(FUSED_DIR / "bias_relu.py"),
    "l1_relu", "l1_gelu", "l1_softmax", "l1_layernorm", "l2_linear_relu", "l1_matmul",
]  # fmt: skip
LOADS = (0, 2, 4)


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


def _solution(task: str) -> str:
    """The honest solution of a shipped task, or of a benchmark task file (``<name>_solution.py`` beside it)."""
    if task.endswith(".py"):
        return Path(task).with_name(Path(task).stem + "_solution.py").read_text()
    return solution_source(task, "cpu")


def _speedup_round(pools: dict[str, EvaluatorPool], tasks: Sequence[str], seed: int) -> list[dict[str, Any]]:
    rows = []
    for mode, pool in pools.items():
        for tid in tasks:
            r = pool.submit(get_task(tid), _solution(tid), seed=seed).result()
            name = Path(tid).stem if tid.endswith(".py") else tid
            rows.append({"mode": mode, "task": name, "stage": r.stage.value, "speedup": r.speedup,
                         "low": r.speedup_low, "high": r.speedup_high, "pairs": r.timing_pairs,
                         "score": candidate_score(r), "flags": list(r.flags)})  # fmt: skip
    return rows


def _mode_timing(mode: str) -> TimingConfig:
    """``reference[:allocator]``: ``paired``, ``dedicated_host:system`` (``TimingConfig.allocator``, default steady)."""
    reference, _, allocator = mode.partition(":")
    return SPEEDUP_TIMING.replace(reference=reference, allocator=allocator or "steady")


def speedups(tasks: Sequence[str], evals: int, modes: Sequence[str]) -> dict[str, Any]:
    """Evaluate ``tasks`` ``evals`` times per load level of :data:`LOADS` and timing mode, levels interleaved."""
    configs = {m: EvalConfig(num_trials=2, timing=_mode_timing(m)) for m in modes}
    rows: list[dict[str, Any]] = []
    pools = {m: EvaluatorPool("cpu", c, compile_workers=1, max_in_flight=1) for m, c in configs.items()}
    try:
        _speedup_round(pools, tasks, seed=99)  # builds and the dedicated host's reference times: outside
        for k in range(evals):
            for load in LOADS:
                with saturated(load) if load else _nothing():
                    rows += [{**r, "load": load, "round": k} for r in _speedup_round(pools, tasks, seed=k)]
    finally:
        for pool in pools.values():
            pool.close()
    return {"tasks": list(tasks), "evals": evals, "rows": rows, "summary": summarize(rows)}


@contextmanager
def _nothing() -> Iterator[int]:
    yield 0


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode and task: median speedup per load level, its change from idle, fast_1.0 decisions, and the share of
    loaded evaluations whose s(c) is within 0.1 of the idle median s(c); with the issue's targets checked."""
    out: dict[str, Any] = {}
    for mode in sorted({r["mode"] for r in rows}):
        per_task, near, total = {}, 0, 0
        for tid in dict.fromkeys(r["task"] for r in rows):
            mine = [r for r in rows if r["mode"] == mode and r["task"] == tid and r["speedup"] is not None]
            by = {ld: [r for r in mine if r["load"] == ld] for ld in LOADS}
            if not by[0]:
                continue
            med = {ld: statistics.median(r["speedup"] for r in rs) if rs else None for ld, rs in by.items()}
            s_idle = statistics.median(r["score"] for r in by[0])
            loaded = [r for ld in LOADS[1:] for r in by[ld]]
            near += sum(abs(r["score"] - s_idle) <= 0.1 for r in loaded)
            total += len(loaded)
            per_task[tid] = {
                "median": {str(ld): m for ld, m in med.items()},
                "change": {str(ld): (m / med[0] - 1.0) if m else None for ld, m in med.items() if ld},
                "fast_1.0": {str(ld): (m > 1.0) if m else None for ld, m in med.items()},
                "ci_width_idle": statistics.median((r["high"] or 0) - (r["low"] or 0) for r in by[0]),
            }
        within = all(abs(c) <= 0.10 for t in per_task.values() for c in t["change"].values() if c is not None)
        same = all(len({v for v in t["fast_1.0"].values() if v is not None}) == 1 for t in per_task.values())
        share = near / total if total else None
        out[mode] = {"tasks": per_task, "score_within_0.1": share, "targets": {
            "speedup_within_10pct": within, "score_95pct": share is not None and share >= 0.95, "fast_1.0_same": same,
        }}  # fmt: skip
    return out


def _print_speedups(report: dict[str, Any]) -> None:
    for mode, m in report["summary"].items():
        print(f"[{mode}] task                 idle     2/core   4/core   change2  change4  fast_1.0")
        for tid, t in m["tasks"].items():
            med, ch = t["median"], t["change"]
            cells = " ".join(f"{(med[str(ld)] or float('nan')):8.3f}" for ld in LOADS)
            chg = " ".join(f"{(ch[str(ld)] or float('nan')):+8.1%}" for ld in LOADS[1:])
            print(f"[{mode}] {tid:<20} {cells} {chg}  {list(t['fast_1.0'].values())}")
        print(f"[{mode}] s(c) within 0.1 of idle: {m['score_within_0.1']}  targets: {m['targets']}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run both passes, print them side by side, write JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="", help="comma-separated task ids (default: every shipped CPU solution)")
    p.add_argument("--per-core", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("out/load_independence.json"))
    p.add_argument("--speedups", action="store_true", help="speedups idle and under load (see the docstring)")
    p.add_argument("--evals", type=int, default=5)
    p.add_argument("--modes", default="paired,dedicated_host")
    a = p.parse_args(argv)
    if a.speedups:
        report = speedups([t for t in a.tasks.split(",") if t] or SPEEDUP_TASKS, a.evals, a.modes.split(","))
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=2))
        _print_speedups(report)
        return 0
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
