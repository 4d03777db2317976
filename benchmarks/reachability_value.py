"""What does the Python reachability analysis refuse that nothing before a build would, and what does that save?

The reachability analysis is step 4 of the static checks (:func:`musaenv.verification.analyze_candidate`, the data
flow through ``ModelNew.forward`` in ``static_flow.py``, ``static_calls.py``, ``static_model.py``): it raises
``forbidden_torch_op``, ``no_custom_kernel``, ``try_except_fallback`` (strict), ``reference_model``,
``output_cache`` and ``missing_model_new``. ``analyze_candidate(..., reachability=False)`` runs everything else
(the safety bans, the extension scan, the policy's file-wide checks).

Corpora, each judged under every policy of ``--policies`` (no sampling in the static phase):

* ``adversarial``: every file in ``tests/adversarial/candidates/`` and ``candidates_measure/``, rendered as the
  suite renders it (placeholders point into a temporary folder and a closed port), on the suite's task; the
  suite's kernelbench-honest files are left out under ``strict``, which refuses their small torch op by design.
* ``solutions``: every shipped solution of every backend (honest: any refusal is a false positive).
* ``trajectories``: the distinct candidate programs in ``tests/data/trajectories/*.jsonl`` (scripted episodes from
  ``candidate_pool.py``: the only recorded trajectories the repository has; no model-written ones exist).

Phase 1 (static): each candidate through ``analyze_candidate`` with the analysis on and off, ``--reps`` times each,
median milliseconds. Phase 2 (evaluation): each candidate the analysis alone refuses (refused with it on, not
without it) is evaluated by the real :class:`LocalEvaluator` with the analysis off (its ``analyze_candidate``
called with ``reachability=False``, nothing else changed), with the build cache emptied before each (cold builds,
as for a new model-written candidate; the precompiled header is kept, built once beforehand): its verdict says
whether a later layer refuses it too and with which flag, its ``eval_time_s`` is what the early refusal saved.
``--max-evals N`` evaluates every k-th of them (k = ceil(count / N)).

Usage (repository root)::

    PYTHONPATH=. python benchmarks/reachability_value.py [--policies strict kernelbench permissive] [--reps 3]
        [--max-evals 40] [--no-eval] [--out out/reachability.json]

Prints a table and a summary per policy and writes JSON; never asserts. Results: docs/verification.md ("What the
Python reachability analysis is worth").
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids
from musaenv.tasks.parsing import extract_candidate
from musaenv.tasks.task import Task
from musaenv.types import EvalResult
from musaenv.verification import static_py

REPO = Path(__file__).resolve().parents[1]
TRAJECTORIES = REPO / "tests" / "data" / "trajectories"
BACKENDS = ("cpu", "cuda", "triton", "musa", "cupy")


@dataclass
class Candidate:
    """One program of a corpus: ``task`` is the evaluation's task key (``None``: judged statically only)."""

    corpus: str
    name: str
    source: str
    policy: str = "strict"
    backend: str = "cpu"
    task: str | None = None


@dataclass
class Outcome:
    """What the static checks said with the analysis on and off, and the evaluation without it (when run)."""

    corpus: str
    name: str
    policy: str
    flags_on: list[str]
    flags_off: list[str]
    ms_on: float
    ms_off: float
    warnings_on: list[str] = field(default_factory=list)
    stage: str | None = None
    flags_later: list[str] = field(default_factory=list)
    eval_s: float | None = None
    compile_s: float | None = None

    @property
    def kind(self) -> str:
        """``accepted``, ``also_refused`` (refused before a build without the analysis too) or ``analysis_only``."""
        return static_kind(self.flags_on, self.flags_off)


def static_kind(flags_on: list[str], flags_off: list[str]) -> str:
    """Classify one candidate by the static errors with the analysis on and off."""
    if not flags_on:
        return "accepted"
    return "also_refused" if flags_off else "analysis_only"


def later_verdict(stage: str | None, flags: list[str]) -> str:
    """What the evaluation without the analysis ended in: ``passed`` (a positive verdict: only the analysis stops
    it), ``cheating`` (a later layer refused it as a cheat), ``failed`` (no reward for another reason), or
    ``not_run``."""
    if stage is None:
        return "not_run"
    if stage == "correct":
        return "passed"
    return "cheating" if stage == "cheating" and flags else "failed"


def trajectory_programs(folder: Path) -> list[tuple[str, str, str]]:
    """``(name, task_id, code)`` of every distinct candidate program in the recorded episodes of ``folder``."""
    seen: dict[str, tuple[str, str, str]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            ep = json.loads(line)
            for turn in ep.get("turns", []):
                code = extract_candidate(turn.get("response", "")).code
                if code is not None and code not in seen:
                    name = f"{path.stem}:{line_no}:t{turn.get('turn')}"
                    seen[code] = (name, ep["task_id"], code)
    return list(seen.values())


def every_kth(items: list[Any], limit: int | None) -> list[Any]:
    """At most ``limit`` items, every k-th (k = ceil(len / limit)); all of them when ``limit`` is None."""
    if limit is None or len(items) <= limit:
        return list(items)
    k = math.ceil(len(items) / max(limit, 1))
    return items[::k]


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts per corpus, per analysis flag among the candidates only it refuses, and the seconds saved."""
    per_corpus: dict[str, Counter[str]] = {}
    for o in outcomes:
        per_corpus.setdefault(o.corpus, Counter())[o.kind] += 1
    only = [o for o in outcomes if o.kind == "analysis_only"]
    by_flag: dict[str, Counter[str]] = {}
    for o in only:
        for f in o.flags_on:
            by_flag.setdefault(f, Counter())[later_verdict(o.stage, o.flags_later)] += 1
            if len(o.flags_on) == 1:
                by_flag[f]["sole_flag"] += 1
    run = [o for o in only if o.eval_s is not None]
    diff = [o.ms_on - o.ms_off for o in outcomes]
    return {
        "per_corpus": {c: dict(n) for c, n in per_corpus.items()},
        "flagged": sum(1 for o in outcomes if set(o.flags_on) - set(o.flags_off)),  # an error of the analysis's own
        "analysis_only": len(only),
        "later": dict(Counter(later_verdict(o.stage, o.flags_later) for o in only)),
        "later_flags": dict(Counter(f for o in run for f in o.flags_later)),
        "by_flag": {f: dict(n) for f, n in sorted(by_flag.items())},
        "saved_s_total": sum(o.eval_s or 0.0 for o in run),
        "saved_s_median": statistics.median([o.eval_s or 0.0 for o in run]) if run else None,
        "compile_s_median": statistics.median([o.compile_s or 0.0 for o in run]) if run else None,
        "analysis_ms_median": statistics.median(diff) if diff else None,
        "analysis_ms_max": max(diff) if diff else None,
        "static_ms_on_median": statistics.median([o.ms_on for o in outcomes]) if outcomes else None,
    }


def _adversarial(placeholders: dict[str, str], policy: str) -> list[Candidate]:
    from tests.adversarial import test_adversarial as adv
    from tests.adversarial.hostile_kernels import CANDIDATES_DIR, render
    from tests.adversarial.test_measurement_escapes import MEASURE_DIR, render_measure

    out = []
    for p in sorted(CANDIDATES_DIR.glob("*.py")):
        if policy == "strict" and p.stem in adv.KERNELBENCH_HONEST:
            continue  # honest only where a small torch op is tolerated: strict refuses it by design
        out.append(Candidate("adversarial", p.stem, render(p.stem, **placeholders), policy, task=adv.task_key(p.stem)))
    for p in sorted(MEASURE_DIR.glob("*.py")):
        out.append(Candidate("adversarial", p.stem, render_measure(p.stem), policy, task="relu"))
    return out


def _solutions(policy: str) -> list[Candidate]:
    by_backend = [(b, t) for b in BACKENDS for t in solved_task_ids(b)]
    return [Candidate("solutions", f"{b}/{t}", solution_source(t, b), policy, backend=b) for b, t in by_backend]


def _trajectories(policy: str) -> list[Candidate]:
    """The recorded programs, on their episode's task when it is a built-in one (``file:`` tasks: static only)."""
    progs = trajectory_programs(TRAJECTORIES)
    return [
        Candidate("trajectories", n, code, policy, task=None if ":" in t else f"builtin:{t}") for n, t, code in progs
    ]


def _static(c: Candidate, reps: int) -> Outcome:
    ms: dict[bool, list[float]] = {True: [], False: []}
    flags: dict[bool, list[str]] = {}
    warnings: dict[bool, list[str]] = {}
    for _ in range(reps):
        for on in (True, False):
            t0 = time.perf_counter()
            report = static_py.analyze_candidate(c.source, policy=c.policy, backend=c.backend, reachability=on)
            ms[on].append((time.perf_counter() - t0) * 1e3)
            flags[on], warnings[on] = list(report.flags), list(report.warning_flags)
    med = {on: statistics.median(v) for on, v in ms.items()}
    return Outcome(c.corpus, c.name, c.policy, flags[True], flags[False], med[True], med[False], warnings[True])


class NoReachabilityEvaluator(LocalEvaluator):
    """The real evaluator, its static stage calling ``analyze_candidate(..., reachability=False)``."""

    def _static(self, code: str) -> EvalResult | tuple[str, ...]:
        off = functools.partial(static_py.analyze_candidate, reachability=False)
        with mock.patch.object(static_py, "analyze_candidate", off):
            return super()._static(code)


def _evaluators(policies: list[str]) -> dict[str, LocalEvaluator]:
    """One evaluator per policy: the adversarial suite's ``FULL`` configuration under that static policy."""
    from tests.adversarial.test_adversarial import FULL

    return {p: NoReachabilityEvaluator("cpu", dataclasses.replace(FULL, static_policy=p)) for p in policies}


def _task(key: str, suite: dict[str, Task]) -> Task:
    return get_task(key.split(":", 1)[1]) if key.startswith("builtin:") else suite[key]


def _ready(ev: LocalEvaluator) -> None:
    spare = ev._spare  # the pre-started next worker: its start-up is hidden behind the previous evaluation in use
    if spare is not None:
        spare.wait_ready(300.0)


def _evaluate(todo: list[tuple[Candidate, Outcome]], warm: Candidate) -> None:
    """Fill in the verdicts and times of the evaluations without the analysis, each from an empty build cache."""
    from musaenv import _env
    from tests.adversarial.test_adversarial import suite_tasks

    suite = suite_tasks()
    evaluators = _evaluators(sorted({c.policy for c, _ in todo}))
    try:
        for ev in evaluators.values():  # the precompiled header and the reference's caches, not counted
            ev.evaluate(_task(warm.task or "relu", suite), warm.source, seed=0)
        for c, o in todo:
            ev = evaluators[c.policy]
            shutil.rmtree(_env.ext_cache_root(), ignore_errors=True)
            _ready(ev)
            t0 = time.perf_counter()
            r = ev.evaluate(_task(c.task or "relu", suite), c.source, seed=1)
            o.eval_s = time.perf_counter() - t0
            o.stage, o.flags_later, o.compile_s = r.stage.value, list(r.flags), r.compile_time_s
            print(
                f"  {c.policy:<12}{c.name:<28} {o.stage:<14} {','.join(o.flags_later):<40} {o.eval_s:7.1f} s",
                flush=True,
            )
    finally:
        for ev in evaluators.values():
            ev.close()


def _table(outcomes: list[Outcome]) -> str:
    head = f"{'policy':<12}{'corpus':<13}{'candidate':<34}{'on ms':>8}{'off ms':>8}  {'analysis flags':<40}"
    head += f"{'later':<12}{'eval s':>7}"
    lines = [head]
    for o in outcomes:
        if o.kind == "accepted":
            continue
        later = later_verdict(o.stage, o.flags_later) if o.kind == "analysis_only" else "-"
        extra = set(o.flags_on) - set(o.flags_off)
        row = f"{o.policy:<12}{o.corpus:<13}{o.name[:33]:<34}{o.ms_on:>8.1f}{o.ms_off:>8.1f}  "
        row += f"{','.join(sorted(extra))[:39]:<40}"
        lines.append(row + f"{later:<12}{o.eval_s if o.eval_s is not None else 0:>7.1f}")
    return "\n".join(lines)


def _corpus(work: Path, policies: list[str]) -> list[Candidate]:
    closed_port = "9"  # discard: nothing listens there
    subs = {"PWNED_PATH": str(work / "pwned"), "CACHE_PATH": str(work / "poison"), "PORT": closed_port}
    return [c for p in policies for c in _adversarial(subs, p) + _solutions(p) + _trajectories(p)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policies", nargs="+", default=["strict", "kernelbench", "permissive"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-evals", type=int, default=None)
    p.add_argument("--no-eval", action="store_true", help="static phase only")
    p.add_argument("--out", type=Path, default=Path("out/reachability.json"))
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="reach-"))
    os.environ["MUSAENV_CACHE_DIR"] = str(work / "cache")  # cold builds, none of them left behind
    cands = _corpus(work, args.policies)
    t0 = time.perf_counter()
    outcomes = [_static(c, args.reps) for c in cands]
    static_s = time.perf_counter() - t0
    todo = [(c, o) for c, o in zip(cands, outcomes) if o.kind == "analysis_only" and c.task is not None]
    todo = [] if args.no_eval else every_kth(todo, args.max_evals)
    if todo:
        _evaluate(todo, next(c for c in cands if c.name == "honest_relu"))
    summary = {pol: summarize([o for o in outcomes if o.policy == pol]) for pol in args.policies}
    print(_table(outcomes))
    print(json.dumps(summary, indent=1))
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg(),
            "machine": platform.platform(), "cpus": os.cpu_count(), "static_phase_s": static_s,
            "evaluated": len(todo), "argv": sys.argv[1:]}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "outcomes": [asdict(o) for o in outcomes]}))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
