"""Evaluations per minute: musaenv's pool (1 and 2 workers) against a naive KernelBench-style evaluator.

Candidates are the l1_relu CPU solution: *distinct* ones differ by a comment (each is a cold compile) and
*repeated* ones are one candidate many times (cache hits after the first). musaenv's rates are those of a started
pool (as in a training job, which starts its pool once); each pool's start-up is timed separately and printed
beside, with the ratio it would give if counted (``x incl.``). The baseline does what KernelBench's
eval does, in one process: ``load_inline`` into a fresh build directory per candidate (no cache), then 5
correctness trials and 20 timed calls against the reference, in-process. Everything is measured in this run;
baseline batches are smaller (each candidate costs a full compile) and its rate is per candidate.

Usage: ``python benchmarks/throughput.py [--quick] [--out out/throughput.json]``. ``--quick`` stays under ~10
minutes on the 2-core CI machine and ends with ``throughput: distinct=<r>x repeat=<r>x cold_compile=<r>x``.
Writes JSON, prints tables, never asserts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from musaenv import _env
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.pool import EvalRequest, EvaluatorPool
from musaenv.tasks.builtin import get_task

SOLUTION = Path(__file__).resolve().parents[1] / "musaenv" / "tasks" / "solutions" / "cpu" / "l1_relu.py"
# Same work per candidate on both sides: 5 trials (KernelBench's default), 20 timed calls, 3 warm-up calls.
CONFIG = EvalConfig(timing=TimingConfig(repeats=20, warmup=3, max_time_s=5.0))


def variant(tag: str) -> str:
    """The l1_relu solution with a unique module name and comment (a distinct content hash)."""
    text = SOLUTION.read_text().replace('name="musaenv_ref_l1_relu"', f'name="bench_{tag}"')
    return text.replace("#include <torch/extension.h>", f"#include <torch/extension.h>\n// variant {tag}", 1)


_BASELINE = r"""
import json, sys, tempfile, time, os, torch
jobs = json.load(open(sys.argv[1]))
out = []
for job in jobs:
    t0 = time.perf_counter()
    os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="kb-ext-")  # no cache, like a fresh eval
    ref_ns, cand_ns = {}, {}
    exec(compile(job["ref"], "ref.py", "exec"), ref_ns)
    tc = time.perf_counter()
    try:
        exec(compile(job["cand"], "cand.py", "exec"), cand_ns)
        compile_s = time.perf_counter() - tc
        torch.manual_seed(0)
        ref, cand = ref_ns["Model"](*ref_ns["get_init_inputs"]()), cand_ns["ModelNew"](*ref_ns["get_init_inputs"]())
        ok = True
        with torch.no_grad():
            for trial in range(5):
                torch.manual_seed(trial)
                x = ref_ns["get_inputs"]()
                ok &= bool(torch.allclose(ref(*x), cand(*x), atol=1e-4, rtol=1e-4))
            for model in (ref, cand):
                for _ in range(3):
                    model(*x)
                for _ in range(20):
                    model(*x)
        stage = "correct" if ok else "incorrect"
    except Exception as e:
        compile_s, stage = time.perf_counter() - tc, type(e).__name__
    out.append({"stage": stage, "compile_s": compile_s, "total_s": time.perf_counter() - t0})
print(json.dumps(out))
"""


def baseline(n: int) -> dict[str, Any]:
    """The KernelBench-style evaluator on ``n`` distinct candidates (it caches nothing, so repeats cost the same)."""
    task = get_task("l1_relu")
    ref = task.render_source(task.shapes_for("cpu")[0])
    jobs = [{"ref": ref, "cand": variant(uuid.uuid4().hex[:12])} for _ in range(n)]
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(jobs, f)
        f.flush()
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _BASELINE, f.name], capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    jobs_s = sum(r["total_s"] for r in rows)  # its own start-up (interpreter, torch import) excluded, like ours
    return {"n": n, "wall_s": jobs_s, "startup_s": wall - jobs_s, "per_min": 60 * n / jobs_s,
            "stages": [r["stage"] for r in rows], "compile_s": [r["compile_s"] for r in rows]}  # fmt: skip


def ours(responses: list[str], workers: int, warm: str | None = None) -> dict[str, Any]:
    """musaenv's pool on a batch, timed once the pool is started (a training job starts it once).

    Start-up (pool, fork server, reference worker, and one evaluation of ``warm``, an already built candidate
    that is not part of the batch) is measured separately as ``startup_s``; ``wall_s`` and ``per_min`` cover
    the batch alone. ``with_startup_per_min`` counts both, as a fresh job evaluating only this batch would.
    """
    task = get_task("l1_relu")
    t0 = time.perf_counter()
    with EvaluatorPool("cpu", CONFIG, compile_workers=workers, max_in_flight=workers) as pool:
        if warm is not None:
            pool.evaluate(task, warm, seed=10**6)
        t1 = time.perf_counter()
        results = pool.evaluate_many([EvalRequest(task, r, seed=i) for i, r in enumerate(responses)], progress=False)
        t2 = time.perf_counter()
    wall, n = t2 - t1, len(responses)
    compiles = [r.compile_time_s for r in results if r.compile_time_s]
    return {"n": n, "workers": workers, "wall_s": wall, "per_min": 60 * n / wall, "startup_s": t1 - t0,
            "with_startup_per_min": 60 * n / (t2 - t0), "stages": sorted({r.stage.value for r in results}),
            "compile_s": compiles, "median_compile_s": statistics.median(compiles) if compiles else None}  # fmt: skip


def main() -> None:
    """Measure, print tables, write JSON, print the summary line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (under ~10 minutes here)")
    ap.add_argument("--out", default="out/throughput.json")
    args = ap.parse_args()
    n_base, n_dist, n_rep, sizes = (2, 4, 8, (10, 20)) if args.quick else (4, 10, 20, (10, 50, 200))
    warm_src = variant("warmup-" + uuid.uuid4().hex[:8])
    warm = ours([warm_src], 1)  # precompiled headers, binding objects, reference timing; then a built candidate
    res: dict[str, Any] = {"cache_dir": str(_env.cache_dir()), "warmup": warm, "baseline": baseline(n_base)}
    res["distinct"] = {w: ours([variant(uuid.uuid4().hex[:12]) for _ in range(n_dist)], w, warm_src) for w in (1, 2)}
    same = variant("repeat-" + uuid.uuid4().hex[:8])
    res["repeat"] = {w: ours([same] * n_rep, w, warm_src) for w in (1, 2)}
    res["batch_size"] = {n: ours([same] * n, 2, warm_src) for n in sizes}
    base_rate = res["baseline"]["per_min"]
    best_d = max(r["per_min"] for r in res["distinct"].values())
    best_r = max(r["per_min"] for r in res["repeat"].values())
    our_compile = statistics.median(res["distinct"][1]["compile_s"])  # 1 worker: no parallel compile, like the baseline
    cold = statistics.median(res["baseline"]["compile_s"]) / our_compile
    res["ratios"] = {"distinct": best_d / base_rate, "repeat": best_r / base_rate, "cold_compile": cold}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2, default=str))
    head = f"{'run':<28}{'n':>5}{'wall s':>10}{'evals/min':>11}{'x baseline':>12}{'start-up s':>12}{'x incl.':>9}"
    print(head)
    print(f"{'baseline (KernelBench-like)':<28}{res['baseline']['n']:>5}{res['baseline']['wall_s']:>10.1f}"
          f"{base_rate:>11.2f}{1.0:>12.2f}{res['baseline']['startup_s']:>12.1f}")  # fmt: skip
    rows = [(f"{kind}, {w} worker(s)", r) for kind in ("distinct", "repeat") for w, r in res[kind].items()]
    rows += [(f"repeat, batch {n}, 2 workers", r) for n, r in res["batch_size"].items()]
    for label, r in rows:
        print(f"{label:<28}{r['n']:>5}{r['wall_s']:>10.1f}{r['per_min']:>11.2f}{r['per_min'] / base_rate:>12.2f}"
              f"{r['startup_s']:>12.1f}{r['with_startup_per_min'] / base_rate:>9.2f}")  # fmt: skip
    print(f"cold compile: baseline median {statistics.median(res['baseline']['compile_s']):.1f} s (load_inline + "
          f"import), musaenv median {our_compile:.1f} s")  # fmt: skip
    print(f"wrote {args.out}")
    r = res["ratios"]
    print(f"throughput: distinct={r['distinct']:.2f}x repeat={r['repeat']:.2f}x cold_compile={r['cold_compile']:.2f}x")


if __name__ == "__main__":
    main()
