"""Samples per minute of ``musaenv bench`` against one ``musaenv eval`` process per sample, on the same generations.

The generations mimic a model's: about a third fail to compile, a third compile but compute the wrong thing, a
third are correct, spread over three built-in tasks (l1_relu, l1_add, l1_gelu; CPU solutions). Every sample is
distinct (a unique comment in its C++ source), so each one is a cold compile on both sides; each side gets its
own copy of the samples, so neither reuses the other's builds. Each side runs with a fresh cache folder whose
precompiled headers are borrowed (symlinked) from your cache, so a one-off header build is not timed; reference
timings start cold on both sides. Both use the defaults (5 trials, 20 timed calls) on the CPU backend, and both
rates are end to end: process start-up, pool start-up and the summary included.

Usage: ``python benchmarks/bench_throughput.py [--n 200] [--workers 2] [--out out/bench_throughput.json]``.
Prints a table and ``bench_throughput: <ratio>x``; writes JSON; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from musaenv import _env
from musaenv.tasks.builtin import solution_source

ROOT = Path(__file__).resolve().parents[1]
# task -> (text of the correct line, the same line computing the wrong thing)
WRONG = {
    "l1_relu": ("po[i] = v > 0.0f ? v : 0.0f;", "po[i] = v > 0.0f ? v : 0.5f * v;"),
    "l1_add": ("po[i] = pa[i] + pb[i];", "po[i] = pa[i] - pb[i];"),
    "l1_gelu": ("0.5 * v * (1.0", "0.6 * v * (1.0"),
}
KINDS = ("compile_error", "incorrect", "correct")


def _variant(task: str, kind: str, tag: str) -> str:
    """A distinct response of the given kind (a unique module name and comment: a cold compile)."""
    code = re.sub(r'name="[^"]+"', f'name="bt_{tag}"', solution_source(task, "cpu"), count=1)
    code = code.replace("#include <torch/extension.h>", f"#include <torch/extension.h>\n// sample {tag}", 1)
    if kind == "incorrect":
        right, wrong = WRONG[task]
        assert right in code, (task, right)
        code = code.replace(right, wrong, 1)
    elif kind == "compile_error":
        code = code.replace(f"// sample {tag}", f"// sample {tag}\nint broken_{tag} = ;", 1)
    return f"Here is an optimised kernel.\n```python\n{code}\n```\n"


def generations(n: int, side: str) -> list[dict[str, Any]]:
    """``n`` samples cycling through the kinds and the tasks."""
    run = uuid.uuid4().hex[:6]
    tasks = list(WRONG)
    rows = []
    for i in range(n):
        task, kind = tasks[(i // 3) % len(tasks)], KINDS[i % 3]
        rows.append({"task": task, "sample": i, "response": _variant(task, kind, f"{side}{run}_{i}"), "kind": kind})
    return rows


def _fresh_cache(parent: Path, name: str) -> dict[str, str]:
    """Environment with a new cache folder that borrows the precompiled headers of the current one."""
    cache = parent / name
    cache.mkdir()
    pch = _env.cache_dir() / "pch"
    if pch.is_dir():
        (cache / "pch").symlink_to(pch, target_is_directory=True)
    return {**os.environ, "MUSAENV_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}


def run_bench(rows: list[dict[str, Any]], tmp: Path, workers: int) -> dict[str, Any]:
    """``musaenv bench`` on the samples, one process, timed end to end."""
    gen = tmp / "bench.jsonl"
    gen.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp / "bench_out"
    cmd = [sys.executable, "-m", "musaenv.cli", "bench", str(gen), "--out", str(out), "--backend", "cpu",
           "--workers", str(workers), "--no-plots", "--quiet"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=_fresh_cache(tmp, "cache_bench"), capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"musaenv bench failed:\n{proc.stderr[-3000:]}")
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    kinds = {r["sample"]: r["kind"] for r in rows}
    verdicts = Counter((kinds[r["sample"]], r["result"]["stage"]) for r in results)
    return {"seconds": seconds, "verdicts": verdicts, "summary": json.loads((out / "summary.json").read_text())}


def run_sequential(rows: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    """One ``musaenv eval --json`` process per sample, one after another."""
    env = _fresh_cache(tmp, "cache_eval")
    verdicts: Counter[tuple[str, str]] = Counter()
    t0 = time.perf_counter()
    for r in rows:
        cand = tmp / f"cand_{r['sample']}.md"
        cand.write_text(r["response"])
        cmd = [sys.executable, "-m", "musaenv.cli", "eval", "--task", r["task"], "--candidate", str(cand),
               "--backend", "cpu", "--json"]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        stage = json.loads(proc.stdout)["stage"] if proc.returncode == 0 else f"exit {proc.returncode}"
        verdicts[(r["kind"], stage)] += 1
    return {"seconds": time.perf_counter() - t0, "verdicts": verdicts}


def main() -> None:
    """Run both sides on ``--n`` samples and print samples per minute."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="samples (the issue's size is 200)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="musaenv bench --workers")
    ap.add_argument("--out", default="out/bench_throughput.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as d:
        tmp = Path(d)
        bench = run_bench(generations(args.n, "b"), tmp, args.workers)
        seq = run_sequential(generations(args.n, "e"), tmp)
    rate_b, rate_s = 60 * args.n / bench["seconds"], 60 * args.n / seq["seconds"]
    print(f"{args.n} samples (a third each: compile error, incorrect, correct), {os.cpu_count()} cores")
    print(f"{'':<32}{'seconds':>10}{'samples/min':>14}")
    print(f"{'musaenv bench --workers ' + str(args.workers):<32}{bench['seconds']:>10.1f}{rate_b:>14.1f}")
    print(f"{'musaenv eval, one at a time':<32}{seq['seconds']:>10.1f}{rate_s:>14.1f}")
    for name, side in (("bench", bench), ("eval", seq)):
        print(f"verdicts ({name}): " + ", ".join(f"{k}->{v}: {c}" for (k, v), c in sorted(side["verdicts"].items())))
    print(f"bench_throughput: {rate_b / rate_s:.2f}x")
    report = {
        "n": args.n,
        "workers": args.workers,
        "cores": os.cpu_count(),
        "bench": {"seconds": bench["seconds"], "samples_per_min": rate_b},
        "sequential_eval": {"seconds": seq["seconds"], "samples_per_min": rate_s},
        "ratio": rate_b / rate_s,
        "verdicts": {n: {f"{k}->{v}": c for (k, v), c in s["verdicts"].items()} for n, s in (("bench", bench),
                                                                                              ("eval", seq))},
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
