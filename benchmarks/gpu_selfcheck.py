"""Do the CUDA and Triton backends work end to end on this GPU?

Runs every shipped CUDA and Triton solution through ``KernelGen-v0`` (one turn each) at the GPU-tier shapes,
plus a wrong CUDA kernel and a side-stream timing cheat, prints a compact table (task, backend, compile
seconds, verdict, speedup) and writes it as JSON. It never asserts: read the table. On a machine without an
NVIDIA GPU it exits at once with a message. See docs/gpu-validation.md.

Its first step creates a CUDA context and allocates 1 GiB inside a fully sandboxed worker
(:mod:`musaenv.isolation.gpu_probe`), and names the sandbox layer that fails it, if one does.

Two passes keep it within ~5 minutes on one GPU: CUDA builds happen first, several at a time, in evaluators
with timing off (that is where the compile seconds come from); then every candidate is evaluated once more,
one at a time so that timings never overlap, through the env, with the builds cached.

Usage (from the repository root)::

    python benchmarks/gpu_selfcheck.py [--out out/gpu_selfcheck.json] [--jobs 6] [--only l1_relu,l1_softmax]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.gpu.cuda_candidates, from a checkout

import musaenv  # noqa: F401  (registers KernelGen-v0)
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.isolation.gpu_probe import run_steps
from musaenv.tasks.builtin import get_task, solution_source, solved_task_ids
from tests.gpu.cuda_candidates import SIDE_STREAM_RELU_CUDA, WRONG_RELU_CUDA


@dataclass
class Row:
    """One candidate's outcome."""

    task: str
    backend: str
    candidate: str
    expected: str
    compile_s: float | None
    verdict: str
    speedup: float | None
    flags: list[str]
    note: str
    detail: str = ""  # the tail of the worker's and the compiler's logs: why a verdict differs (JSON only)


@dataclass
class Case:
    """A candidate to evaluate."""

    task: str
    backend: str
    candidate: str
    expected: str
    response: str
    variant: str = "default"  # or "compile_every": torch.compile baseline, reference timed beside the candidate


def _cases(only: set[str] | None) -> list[Case]:
    cases = []
    for backend in ("cuda", "triton"):
        for tid in solved_task_ids(backend):
            if only is None or tid in only:
                src = "```python\n" + solution_source(tid, backend) + "\n```"
                cases.append(Case(tid, backend, "solution", "correct", src))
    if only is None or "l1_relu" in only:  # the torch.compile baseline and every-call checks, on the GPU once
        src = "```python\n" + solution_source("l1_relu", "cuda") + "\n```"
        cases.append(Case("l1_relu", "cuda", "solution vs torch.compile", "correct", src, "compile_every"))
    cases.append(Case("l1_relu", "cuda", "wrong kernel", "incorrect", WRONG_RELU_CUDA))
    cases.append(Case("l1_relu", "cuda", "side-stream cheat", "cheating", SIDE_STREAM_RELU_CUDA))
    return cases


def _eval_config(static_policy: str, timing: bool, variant: str = "default") -> EvalConfig:
    # 10 timed calls after 2 warm-ups: enough for a median, short enough for the whole run to fit in minutes.
    t = TimingConfig(warmup=2, repeats=10, max_time_s=2.0, enabled=timing)
    if variant == "compile_every":
        t = t.replace(baseline="compile", reference="every")
    return EvalConfig(static_policy=static_policy, timing=t)


def build_pass(cases: list[Case], jobs: int) -> dict[int, float | None]:
    """Build every CUDA candidate, ``jobs`` at a time (timing off); returns compile seconds by case index."""
    first: dict[str, int] = {}  # one build per distinct source
    for i, c in enumerate(cases):
        if c.backend == "cuda":
            first.setdefault(c.response, i)

    def one(i: int) -> float | None:
        c = cases[i]
        # Static compute checks off (safety bans stay): a build is all this pass is for.
        with LocalEvaluator("cuda", _eval_config("off", timing=False)) as ev:
            return ev.evaluate(get_task(c.task), c.response, seed=0).compile_time_s

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        seconds = dict(zip(first.values(), pool.map(one, first.values())))
    return {i: seconds[first[c.response]] for i, c in enumerate(cases) if c.backend == "cuda"}


def timed_pass(cases: list[Case], compile_s: dict[int, float | None]) -> list[Row]:
    """Evaluate each case once through the env, one at a time (builds are cached by now)."""
    evaluators: dict[str, LocalEvaluator] = {}
    rows = []
    try:
        for i, c in enumerate(cases):
            key = f"{c.backend}/{c.variant}"
            if key not in evaluators:
                evaluators[key] = LocalEvaluator(c.backend, _eval_config("strict", timing=True, variant=c.variant))
            ev = evaluators[key]
            env = gym.make("KernelGen-v0", task=c.task, backend=c.backend, max_turns=1, evaluator=ev)
            env.reset(seed=i)
            _, _, _, _, info = env.step(c.response)
            env.close()
            res = info["eval"]
            seconds = compile_s.get(i, res.get("compile_time_s"))
            note = "; ".join(res.get("messages") or [])[:120]
            rows.append(
                Row(
                    c.task,
                    c.backend,
                    c.candidate,
                    c.expected,
                    seconds,
                    res["stage"],
                    res.get("speedup"),
                    list(res.get("flags") or []),
                    note,
                    _detail(res),
                )
            )
            print(_format(rows[-1]), flush=True)
            if rows[-1].verdict != c.expected:  # the first run on a GPU showed verdicts with no reason beside them
                print("    " + (rows[-1].detail.strip().splitlines() or ["(no log)"])[-1][:300], flush=True)
    finally:
        for ev in evaluators.values():
            ev.close()
    return rows


def _detail(res: dict[str, Any]) -> str:
    logs = [f"{k}: {str(res.get(k))[-2000:]}" for k in ("runtime_log", "compiler_log") if res.get(k)]
    return "\n".join(logs)


def _format(r: Row) -> str:
    cs = "-" if r.compile_s is None else f"{r.compile_s:7.1f}"
    sp = "-" if r.speedup is None else f"{r.speedup:6.2f}x"
    mark = "" if r.verdict == r.expected else "  <-- expected " + r.expected
    return f"{r.task:24s} {r.backend:7s} {r.candidate:30s} {cs:>8s} {r.verdict:14s} {sp:>8s}{mark}"


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/gpu_selfcheck.json", help="where to write the JSON table")
    p.add_argument(
        "--jobs",
        type=int,
        default=min(6, max(1, (os.cpu_count() or 2) // 2)),
        help="CUDA builds at a time in the build pass",
    )
    p.add_argument("--only", default="", help="comma-separated task ids (default: every shipped solution)")
    return p.parse_args()


def sandbox_first_contact(mb: int = 1024) -> list[dict[str, Any]]:
    """Step 1: a CUDA context and ``mb`` MB allocated inside the worker's full sandbox (the GPU plan); when that
    fails, every step of :mod:`musaenv.isolation.gpu_probe` runs to name the layer that breaks it."""
    steps = run_steps("cuda", mb, steps=("full",))
    if not steps[0].get("ok"):
        steps = run_steps("cuda", mb)
    for r in steps:
        verdict = "ok" if r.get("ok") else f"FAILED (layer: {r.get('failed_layer', '?')}): {r.get('error')}"
        print(f"sandbox first contact [{r['step']}]: {verdict} {r.get('detail', '')}", flush=True)
    return steps


def main() -> int:
    """Run both passes, print the table, write JSON."""
    args = _parse_args()
    if not torch.cuda.is_available():
        print(
            "gpu_selfcheck: no NVIDIA GPU is visible (torch.cuda.is_available() is False); nothing was run. "
            "Run this on a machine with a CUDA GPU and a CUDA build of torch.",
            file=sys.stderr,
        )
        return 2
    start = time.perf_counter()
    first_contact = sandbox_first_contact()
    only = {s for s in args.only.split(",") if s} or None
    cases = _cases(only)
    compile_s = build_pass(cases, args.jobs)
    build_s = time.perf_counter() - start
    print(f"build pass: {len(compile_s)} CUDA candidates in {build_s:.0f} s\n")
    print(f"{'task':24s} {'backend':7s} {'candidate':30s} {'compile_s':>8s} {'verdict':14s} {'speedup':>8s}")
    rows = timed_pass(cases, compile_s)
    total_s = time.perf_counter() - start
    unexpected = [r for r in rows if r.verdict != r.expected]
    print(f"\n{len(rows)} candidates in {total_s:.0f} s; {len(unexpected)} verdicts differ from the expected one")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "build_pass_s": build_s,
        "total_s": total_s,
        "sandbox_first_contact": first_contact,
    }
    out.write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
