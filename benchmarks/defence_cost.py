"""What do the anti-cheating defences cost per evaluation?

Side by side in one run, on shipped CPU reference solutions (correct, legal candidates: the common case):

* static checks: :func:`musaenv.verification.analyze_candidate` on the solution's source, ``strict`` vs ``off``
  (``off`` still runs the safety bans);
* runtime checks: the same evaluation under four configurations, interleaved round robin so that machine drift hits
  them alike: ``base`` (profiler off, other runtime checks off), ``profiler`` (strict aten-op profile only),
  ``checks`` (kernel-call proof, perturbed run, poisoned repeat, threads, timers, re-measure; no profile), ``all``;
* sandbox: the worker's own measurement of entering it (``extra["sandbox"]["timings_ms"]["total"]``); the sandbox
  cannot be switched off in the evaluator, so there is no "without" run, only its set-up time;
* ``--before REV``: the same solution evaluated by another revision's code (default :data:`ROUND2_REV`, the last
  commit before issue 25's outside measurement, issue 26's paired timing and the stress trials), in a child process
  of its own (the tree read with ``git archive``, its own cache directory, its default settings), in the same round
  robin: the real "before" of the measures taken since, where the other columns switch parts of today's code off.

Each evaluation is timed from ``evaluate()`` to its return, after the evaluator's spare worker has finished starting,
so the worker's start-up (hidden behind the previous evaluation in normal use) is not counted. Prints a table and
writes JSON. It never asserts.

Usage (repository root)::

    python benchmarks/defence_cost.py [--tasks l1_relu l2_linear_relu l3_mlp] [--reps 3] [--before 2c0945e]
        [--configs round2 default ...] [--out out/defence_cost.json]

A second table splits the default's paired timing per evaluation (``extra["timing_cost"]``): prepares, calls,
and the handshake that clocks each call from outside the worker, the outside measurement's own cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
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
    # Today's code with parts switched off (every runtime check on in all three). "round2": the reference timed once
    # and cached and no stress trials, as round 2's default did, but measured from outside the candidate (the
    # parent's accounting of each call, fingerprints read inside each window): against --before's column, the cost
    # of the outside measurement alone. "dedicated" adds the two stress trials of strict; "default" paired timing.
    "round2": {"timing": {"reference": "dedicated_host"}, "stress_trials": 0},
    "dedicated": {"timing": {"reference": "dedicated_host"}},
    "default": {},
}
SPARE_READY_TIMEOUT_S = 300.0
ROUND2_REV = "2c0945e"  # the last commit of round 2: before issue 25's and 26's measures (2026-12-02 03:51 UTC)

# Runs in the other revision's tree (PYTHONPATH): its own evaluator with its own defaults, timed as _runtime_cost
# times today's. One JSON request per line ({task, source, seed}), one JSON answer per line.
_BEFORE_DRIVER = r"""
import json, sys, time
import musaenv
from musaenv.config import EvalConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task
print(json.dumps({"file": musaenv.__file__}), flush=True)
ev = LocalEvaluator("cpu", EvalConfig())
for line in sys.stdin:
    req = json.loads(line)
    t0 = time.perf_counter()
    r = ev.evaluate(get_task(req["task"]), req["source"], seed=req["seed"])
    dt = time.perf_counter() - t0
    spare = getattr(ev, "_spare", None)
    if spare is not None:
        spare.wait_ready(300.0)
    print(json.dumps({"s": dt, "stage": r.stage.value}), flush=True)
ev.close()
"""


@dataclass
class TaskCost:
    """Measurements for one task."""

    task: str
    static_ms: dict[str, list[float]] = field(default_factory=dict)
    eval_s: dict[str, list[float]] = field(default_factory=dict)
    sandbox_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[str]] = field(default_factory=dict)
    timing_cost: list[dict[str, Any]] = field(default_factory=list)  # "default" only: extra["timing_cost"] per eval


class BeforeCode:
    """Another revision's evaluator in a child process (see the module's docstring)."""

    def __init__(self, rev: str, workdir: Path) -> None:
        repo = Path(__file__).resolve().parents[1]
        tree = workdir / "tree"
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(repo), "archive", rev], capture_output=True, check=False)
        if archive.returncode != 0:
            why = archive.stderr.decode().strip()
            raise SystemExit(f"--before {rev}: not in this clone ({why}); a full clone has it")
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        _install_guard(repo, rev, tree)
        env = dict(os.environ, PYTHONPATH=str(tree), MUSAENV_CACHE_DIR=str(workdir / "cache"))
        self.rev = rev
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BEFORE_DRIVER], cwd=workdir, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        where = self._answer()["file"]
        if not str(where).startswith(str(tree)):
            raise SystemExit(f"--before {rev}: the child imported musaenv from {where}, not from {tree}")

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"--before {self.rev}: the child ended (exit {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def evaluate(self, task_id: str, source: str, seed: int) -> tuple[float, str]:
        """One evaluation there: its time and its verdict's stage."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"task": task_id, "source": source, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        return float(answer["s"]), str(answer["stage"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)


def _install_guard(repo: Path, rev: str, tree: Path) -> None:
    """The compiled helper for the other tree: this one's when its source is the same there, else built there."""
    same = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", rev, "--", "csrc"], check=False).returncode == 0
    built = sorted((repo / "musaenv").glob("_guard*.so"))
    if same and built:
        shutil.copy2(built[0], tree / "musaenv" / built[0].name)
    else:
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, check=True)


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


def _runtime_cost(
    task_id: str, source: str, reps: int, cost: TaskCost, before: BeforeCode | None, configs: list[str]
) -> None:
    evaluators = {name: LocalEvaluator("cpu", _config(RUNTIME_CONFIGS[name])) for name in configs}
    task = get_task(task_id)
    try:
        for ev in evaluators.values():  # warm-up: build cache, reference timing cache, spare worker
            ev.evaluate(task, source, seed=0)
            _wait_spare(ev)
        if before is not None:
            before.evaluate(task_id, source, 0)
        for rep in range(reps):
            if before is not None:  # first in each round, as the configurations take turns after it
                seconds, stage = before.evaluate(task_id, source, rep + 1)
                cost.eval_s.setdefault("before", []).append(seconds)
                cost.stages.setdefault("before", []).append(stage)
            for name, ev in evaluators.items():
                t0 = time.perf_counter()
                r = ev.evaluate(task, source, seed=rep + 1)
                cost.eval_s.setdefault(name, []).append(time.perf_counter() - t0)
                cost.stages.setdefault(name, []).append(r.stage.value)
                if name == "default" and "timing_cost" in r.extra:
                    cost.timing_cost.append(r.extra["timing_cost"])
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
    ran = [n for n in RUNTIME_CONFIGS if any(n in c.eval_s for c in costs)]
    names = [*ran, *(["before"] if any("before" in c.eval_s for c in costs) else [])]
    head = f"{'task':<22}{'static strict':>14}{'static off':>11}{'sandbox':>9}" + "".join(f"{n:>10}" for n in names)
    head += f"{'all - base':>12}{'ratio':>7}{'now/rd2':>9}{'ded/rd2':>9}"
    if "before" in names:  # today's code with parts off, and whole, against the other revision's evaluation
        head += f"{'rd2/bef':>9}{'ded/bef':>9}{'now/bef':>9}"
    lines = [head, f"{'':<22}{'ms':>14}{'ms':>11}{'ms':>9}" + "".join(f"{'s':>10}" for _ in names)]
    for c in costs:
        med = {k: _median(v) for k, v in c.eval_s.items()}
        row = f"{c.task:<22}{_median(c.static_ms['strict']) or 0:>14.1f}{_median(c.static_ms['off']) or 0:>11.1f}"
        row += f"{_median(c.sandbox_ms) or 0:>9.1f}" + "".join(f"{med.get(n) or 0:>10.3f}" for n in names)
        base, full = med.get("base"), med.get("all")
        row += f"{full - base:>12.3f}{full / base:>7.2f}" if base and full else f"{'':>19}"
        row += "".join(_ratio(med, now, "round2") for now in ("default", "dedicated"))
        if "before" in names:
            row += "".join(_ratio(med, now, "before") for now in ("round2", "dedicated", "default"))
        lines.append(row)
    return "\n".join(lines)


def _split_table(costs: list[TaskCost]) -> str:
    """Where the default's paired timing spends its wall time, per evaluation (medians over the repetitions, ms):
    the two sides' prepares (inputs drawn, cache flushed), their calls as the parent clocked them, and of those the
    handshake that clocks each call from outside the worker; ``shake/bef``: that handshake against the whole
    evaluation of the other revision (the outside measurement's own cost)."""
    head = f"{'default, per eval (ms)':<22}{'calls':>6}{'ref prep':>10}{'cand prep':>10}{'ref call':>10}"
    head += f"{'cand call':>10}{'handshake':>10}{'eval':>9}{'shake/bef':>10}"
    lines = [head]
    for c in costs:
        if not c.timing_cost:
            continue

        def med(side: str, part: str, tc: list[dict[str, Any]] = c.timing_cost) -> float:
            return statistics.median(float(t[side][part]) for t in tc)

        shake = statistics.median(
            float(t["reference"]["handshake"] + t["candidate"]["handshake"]) for t in c.timing_cost
        )
        calls = statistics.median(int(t["calls"]) for t in c.timing_cost)
        row = f"{c.task:<22}{calls:>6.0f}{med('reference', 'prepare'):>10.1f}{med('candidate', 'prepare'):>10.1f}"
        row += f"{med('reference', 'window'):>10.1f}{med('candidate', 'window'):>10.1f}{shake:>10.1f}"
        row += f"{(_median(c.eval_s.get('default', [])) or 0) * 1e3:>9.0f}"
        bef = _median(c.eval_s.get("before", []))
        row += f"{shake / (bef * 1e3):>10.1%}" if bef else f"{'':>10}"
        lines.append(row)
    return "\n".join(lines) if len(lines) > 1 else ""


def _ratio(med: dict[str, float | None], now: str, before: str) -> str:
    a, b = med.get(now), med.get(before)
    return f"{a / b:>9.2f}" if a and b else f"{'':>9}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=["l1_relu", "l2_linear_relu", "l3_mlp"])
    p.add_argument("--reps", type=int, default=3)
    help_before = f"also evaluate with this revision's code (bare --before: {ROUND2_REV}, round 2's last)"
    p.add_argument("--before", nargs="?", const=ROUND2_REV, default=None, metavar="REV", help=help_before)
    p.add_argument("--out", type=Path, default=Path("out/defence_cost.json"))
    p.add_argument("--configs", nargs="+", choices=list(RUNTIME_CONFIGS), default=list(RUNTIME_CONFIGS))
    args = p.parse_args()
    costs = []
    with tempfile.TemporaryDirectory(prefix="defence-cost-before-") as tmp:
        before = BeforeCode(args.before, Path(tmp)) if args.before else None
        try:
            for task_id in args.tasks:
                source = solution_source(task_id, "cpu")
                cost = TaskCost(task_id, static_ms=_static_cost(source, max(args.reps, 5)))
                _runtime_cost(task_id, source, args.reps, cost, before, args.configs)
                costs.append(cost)
                print(f"measured {task_id}", flush=True)
        finally:
            if before is not None:
                before.close()
    print(_table(costs))
    print(_split_table(costs))
    record = {
        "host": platform.node(),
        "python": platform.python_version(),
        "configs": {n: RUNTIME_CONFIGS[n] for n in args.configs},
        "before": args.before,
        "reps": args.reps,
        "load_average": os.getloadavg(),
        "tasks": [c.__dict__ for c in costs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
