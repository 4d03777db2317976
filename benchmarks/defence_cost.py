"""What do the anti-cheating defences cost per evaluation?

Side by side in one run, on shipped CPU reference solutions (correct, legal candidates: the common case):

* static checks: :func:`musaenv.verification.analyze_candidate` on the solution's source, ``strict`` vs ``off``
  (``off`` still runs the safety bans);
* runtime checks: the same evaluation under four configurations, interleaved round robin so that machine drift hits
  them alike: ``base`` (profiler off, other runtime checks off), ``profiler`` (strict aten-op profile only),
  ``checks`` (kernel-call proof, perturbed run, poisoned repeat, threads, timers, re-measure; no profile), ``all``;
* sandbox: the worker's own measurement of entering it (``extra["sandbox"]["timings_ms"]["total"]``); the sandbox
  cannot be switched off in the evaluator, so there is no "without" run, only its set-up time.

Each evaluation is timed from ``evaluate()`` to its return, after the evaluator's spare worker has finished starting,
so the worker's start-up (hidden behind the previous evaluation in normal use) is not counted. Prints a table and
writes JSON. It never asserts.

Usage (repository root)::

    python benchmarks/defence_cost.py [--tasks l1_relu l2_linear_relu l3_mlp] [--reps 3] [--out out/defence_cost.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.verification import analyze_candidate

RUNTIME_CONFIGS: dict[str, dict[str, Any]] = {
    "base": {"runtime_policy": "off", "runtime_checks": False},
    "profiler": {"runtime_policy": "strict", "runtime_checks": False},
    "checks": {"runtime_policy": "off", "runtime_checks": True},
    "all": {"runtime_policy": "strict", "runtime_checks": True},
    # The cost of measuring from outside the candidate (issues 25 and 26): the former default (the reference timed
    # once and cached, samples from the worker, no stress trials) against today's (paired timing by the parent's
    # accounting, fingerprints inside the window, two stress trials under strict), every runtime check on in both.
    "round2": {"timing": {"reference": "dedicated_host"}, "stress_trials": 0},
    # today's checks with the reference cached (its times from the parent's clock, fingerprints, stress trials):
    # what separates it from round2 is the outside measurement, what separates default from it is paired timing
    "dedicated": {"timing": {"reference": "dedicated_host"}},
    "default": {},
}
SPARE_READY_TIMEOUT_S = 300.0


@dataclass
class TaskCost:
    """Measurements for one task."""

    task: str
    static_ms: dict[str, list[float]] = field(default_factory=dict)
    eval_s: dict[str, list[float]] = field(default_factory=dict)
    sandbox_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[str]] = field(default_factory=dict)


def _static_cost(source: str, reps: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"strict": [], "off": []}
    for _ in range(reps):
        for policy in out:
            t0 = time.perf_counter()
            analyze_candidate(source, policy=policy, backend="cpu")
            out[policy].append((time.perf_counter() - t0) * 1e3)
    return out


def _config(kw: dict[str, Any]) -> EvalConfig:
    """An EvalConfig from a JSON-safe entry of :data:`RUNTIME_CONFIGS` (``timing`` given as TimingConfig fields)."""
    fields: dict[str, Any] = {k: TimingConfig(**v) if k == "timing" else v for k, v in kw.items()}
    return EvalConfig(**fields)


def _wait_spare(ev: LocalEvaluator) -> None:
    spare = ev._spare  # the evaluator's pre-started next worker; waiting keeps its start-up out of the measurement
    if spare is not None:
        spare.wait_ready(SPARE_READY_TIMEOUT_S)


def _runtime_cost(task_id: str, source: str, reps: int, cost: TaskCost) -> None:
    evaluators = {name: LocalEvaluator("cpu", _config(kw)) for name, kw in RUNTIME_CONFIGS.items()}
    task = get_task(task_id)
    try:
        for ev in evaluators.values():  # warm-up: build cache, reference timing cache, spare worker
            ev.evaluate(task, source, seed=0)
            _wait_spare(ev)
        for rep in range(reps):
            for name, ev in evaluators.items():
                t0 = time.perf_counter()
                r = ev.evaluate(task, source, seed=rep + 1)
                cost.eval_s.setdefault(name, []).append(time.perf_counter() - t0)
                cost.stages.setdefault(name, []).append(r.stage.value)
                total = r.extra.get("sandbox", {}).get("timings_ms", {}).get("total")
                if total is not None:
                    cost.sandbox_ms.append(float(total))
                _wait_spare(ev)
    finally:
        for ev in evaluators.values():
            ev.close()


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _table(costs: list[TaskCost]) -> str:
    head = f"{'task':<22}{'static strict':>14}{'static off':>11}{'sandbox':>9}"
    head += "".join(f"{name:>10}" for name in RUNTIME_CONFIGS)
    head += f"{'all - base':>12}{'ratio':>7}{'now/rd2':>9}{'ded/rd2':>9}"
    lines = [head, f"{'':<22}{'ms':>14}{'ms':>11}{'ms':>9}" + "".join(f"{'s':>10}" for _ in RUNTIME_CONFIGS)]
    for c in costs:
        med = {k: _median(v) for k, v in c.eval_s.items()}
        row = f"{c.task:<22}{_median(c.static_ms['strict']) or 0:>14.1f}{_median(c.static_ms['off']) or 0:>11.1f}"
        row += f"{_median(c.sandbox_ms) or 0:>9.1f}" + "".join(f"{med.get(n) or 0:>10.3f}" for n in RUNTIME_CONFIGS)
        base, full = med.get("base"), med.get("all")
        if base and full:
            row += f"{full - base:>12.3f}{full / base:>7.2f}"
        before, now = med.get("round2"), med.get("default")
        if before and now:
            row += f"{now / before:>9.2f}"
        if before and med.get("dedicated"):
            row += f"{med['dedicated'] / before:>9.2f}"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=["l1_relu", "l2_linear_relu", "l3_mlp"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("out/defence_cost.json"))
    args = p.parse_args()
    costs = []
    for task_id in args.tasks:
        source = solution_source(task_id, "cpu")
        cost = TaskCost(task_id, static_ms=_static_cost(source, max(args.reps, 5)))
        _runtime_cost(task_id, source, args.reps, cost)
        costs.append(cost)
        print(f"measured {task_id}", flush=True)
    print(_table(costs))
    record = {
        "host": platform.node(),
        "python": platform.python_version(),
        "configs": RUNTIME_CONFIGS,
        "reps": args.reps,
        "tasks": [c.__dict__ for c in costs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
