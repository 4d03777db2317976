"""What does one evaluation cost? Cold compile (plain ``load_inline`` vs musaenv's builds), cache hits, warm
evaluations and the env's own overhead per step, all measured side by side in one run.

* cold compile: the l1_relu CPU solution with a unique comment (so nothing is cached), built by (a) torch's
  plain ``load_inline`` in a fresh process, as KernelBench's eval does, (b) musaenv ``fast`` (split binding,
  precompiled ``torch/all.h``), (c) musaenv ``pch`` (torch's ``main.cpp`` with a precompiled
  ``torch/extension.h``). Wall and CPU seconds (CPU is steadier on a shared machine). The first musaenv build
  also pays for the precompiled headers and binding objects (reported as ``first_ever``).
* cache hit: the same spec again, in this process and from a fresh process.
* warm evaluation: ``LocalEvaluator.evaluate`` of a correct candidate whose module is cached.
* env overhead: a ``format_error`` step; a cached correct step minus the evaluation time; evaluation time minus
  the candidate's timed calls.

Usage: ``python benchmarks/core_costs.py [--reps 1] [--out out/core_costs.json]``. Writes JSON, prints a table,
never asserts.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from musaenv import _env
from musaenv.toolchains.loader import BuildSpec, build_extension

SOLUTION = Path(__file__).resolve().parents[1] / "musaenv" / "tasks" / "solutions" / "cpu" / "l1_relu.py"


def relu_cpp(tag: str) -> str:
    """The l1_relu solution's C++ with a unique comment appended (a distinct content hash)."""
    text = SOLUTION.read_text()
    return text.split('CPP = r"""')[1].split('"""')[0] + f"\n// musaenv benchmark variant {tag}\n"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


_PLAIN = """
import sys, time, torch.utils.cpp_extension as ce
src, d = open(sys.argv[1]).read(), sys.argv[2]
t = time.perf_counter()
ce.load_inline(name="plain_" + sys.argv[3], cpp_sources=src, functions=["relu_forward"], extra_cflags=["-O3"],
               build_directory=d, verbose=False)
print(time.perf_counter() - t)
"""


def plain_build(cpp: str) -> dict[str, float]:
    """Torch's ``load_inline`` in a fresh process (no cache): wall of the call, of the process, and CPU."""
    with tempfile.TemporaryDirectory(prefix="musaenv-plain-") as d:
        src = Path(d) / "src.cpp"
        src.write_text(cpp)
        build = Path(d) / "build"
        build.mkdir()
        cpu0, t0 = _children_cpu(), time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _PLAIN, str(src), str(build), uuid.uuid4().hex[:8]],
                             capture_output=True, text=True, check=True)  # fmt: skip
        # cpu_s includes the process's torch import (~2 s of CPU); wall_s is the load_inline call alone
        return {"wall_s": float(out.stdout.strip().splitlines()[-1]), "process_wall_s": time.perf_counter() - t0,
                "cpu_s": _children_cpu() - cpu0}  # fmt: skip


def ours_build(cpp: str, mode: str, root: Path) -> dict[str, Any]:
    """musaenv's :func:`build_extension` in ``mode`` (a cold build unless the spec was built before)."""
    spec = BuildSpec.from_load_inline({"cpp_sources": cpp, "functions": ["relu_forward"], "extra_cflags": ["-O3"]},
                                      "cpu")  # fmt: skip
    cpu0, t0 = _children_cpu(), time.perf_counter()
    res = build_extension(spec, timeout_s=1800, root=root, mode=mode)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": _children_cpu() - cpu0, "ok": res.ok,
            "cached": res.cached, "tier": res.extra.get("tier"), "log": res.log[-300:]}  # fmt: skip


_HIT = """
import sys, time
from pathlib import Path
t = time.perf_counter()
from musaenv.toolchains.loader import BuildSpec, build_extension
spec = BuildSpec.from_load_inline({"cpp_sources": open(sys.argv[1]).read(), "functions": ["relu_forward"],
                                  "extra_cflags": ["-O3"]}, "cpu")
res = build_extension(spec, root=Path(sys.argv[2]))
print(res.cached, time.perf_counter() - t)
"""


def cache_hits(cpp: str, root: Path) -> dict[str, Any]:
    """Cache-hit time in this process and in a fresh one (import of the loader included)."""
    ours_build(cpp, "fast", root)  # make sure it is built
    in_proc = ours_build(cpp, "fast", root)
    with tempfile.NamedTemporaryFile("w", suffix=".cpp") as f:
        f.write(cpp)
        f.flush()
        out = subprocess.run([sys.executable, "-c", _HIT, f.name, str(root)], capture_output=True, text=True,
                             check=True, env=_env.child_env())  # fmt: skip
    cached, secs = out.stdout.split()
    return {"in_process_s": in_proc["wall_s"], "in_process_cached": in_proc["cached"],
            "fresh_process_s": float(secs), "fresh_process_cached": cached == "True"}  # fmt: skip


def env_costs() -> dict[str, Any]:
    """Warm evaluation time and the env's overhead beyond compiling and running."""
    import gymnasium as gym

    import musaenv  # noqa: F401  (registers the env ids)
    from musaenv.config import EvalConfig
    from musaenv.evaluator.local import LocalEvaluator
    from musaenv.tasks.builtin import get_task

    solution = SOLUTION.read_text()
    ev = LocalEvaluator("cpu", EvalConfig())
    try:
        task = get_task("l1_relu")
        first = ev.evaluate(task, solution, seed=1)  # builds (or hits) and caches the reference timing
        warm = [ev.evaluate(task, solution, seed=2 + i) for i in range(3)]
        env = gym.make("KernelGen-v0", task="l1_relu", backend="cpu", evaluator=ev, max_turns=3)
        env.reset(seed=0)
        t0 = time.perf_counter()
        _, _, _, _, info_bad = env.step("no code at all")
        format_step_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, _, _, _, info = env.step(solution)
        step_s = time.perf_counter() - t0
        env.close()
    finally:
        ev.close()
    e = info["eval"]
    timed_s = (e["timing"]["mean_ms"] * e["timing"]["n"] / 1000) if e.get("timing") else 0.0
    return {
        "first_eval_stage": first.stage.value, "first_eval_s": first.eval_time_s,
        "warm_eval_s": [w.eval_time_s for w in warm], "warm_stage": [w.stage.value for w in warm],
        "format_error_step_s": format_step_s, "format_error_stage": info_bad["eval"]["stage"],
        "cached_correct_step_s": step_s, "step_eval_time_s": e["eval_time_s"],
        "env_overhead_s": step_s - (e["eval_time_s"] or 0.0), "candidate_timed_calls_s": timed_s,
        "evaluator_overhead_s": (e["eval_time_s"] or 0.0) - timed_s, "build_cached": e["build_cached"],
    }  # fmt: skip


def cold_compiles(reps: int, root: Path) -> dict[str, Any]:
    """First-ever build (PCH and binding objects if missing), then interleaved plain / fast / pch cold builds."""
    out: dict[str, Any] = {"first_ever": ours_build(relu_cpp(f"warmup-{uuid.uuid4().hex}"), "fast", root)}
    out["pch_warmup"] = ours_build(relu_cpp(f"warmup-{uuid.uuid4().hex}"), "pch", root)
    rows: dict[str, list[dict[str, Any]]] = {"plain": [], "fast": [], "pch": []}
    for _ in range(reps):
        rows["plain"].append(plain_build(relu_cpp(uuid.uuid4().hex)))
        rows["fast"].append(ours_build(relu_cpp(uuid.uuid4().hex), "fast", root))
        rows["pch"].append(ours_build(relu_cpp(uuid.uuid4().hex), "pch", root))
    out["runs"] = rows
    mean = {k: {m: sum(r[m] for r in v) / len(v) for m in ("wall_s", "cpu_s")} for k, v in rows.items()}
    out["mean"] = mean
    out["ratio_wall"] = {k: mean["plain"]["wall_s"] / mean[k]["wall_s"] for k in ("fast", "pch")}
    out["ratio_cpu"] = {k: mean["plain"]["cpu_s"] / max(mean[k]["cpu_s"], 1e-9) for k in ("fast", "pch")}
    return out


def main() -> None:
    """Run every measurement, print a table, write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=1, help="interleaved cold-compile repetitions")
    ap.add_argument("--out", default="out/core_costs.json")
    ap.add_argument("--skip-env", action="store_true", help="skip the evaluator/env measurements")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="musaenv-bench-ext-"))
    res: dict[str, Any] = {"cold": cold_compiles(args.reps, root)}
    res["cache_hit"] = cache_hits(relu_cpp("cache-hit"), root)
    if not args.skip_env:
        res["env"] = env_costs()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    cold = res["cold"]
    print(f"{'build':<22}{'wall s':>10}{'cpu s':>10}{'x plain (wall)':>16}{'x plain (cpu)':>15}")
    for k in ("plain", "fast", "pch"):
        m = cold["mean"][k]
        rw = cold["ratio_wall"].get(k, 1.0)
        rc = cold["ratio_cpu"].get(k, 1.0)
        print(f"{k:<22}{m['wall_s']:>10.2f}{m['cpu_s']:>10.2f}{rw:>16.2f}{rc:>15.2f}")
    fe = cold["first_ever"]
    print(f"{'first ever (fast)':<22}{fe['wall_s']:>10.2f}{fe['cpu_s']:>10.2f}   tier={fe['tier']}")
    hit = res["cache_hit"]
    print(f"cache hit: {hit['in_process_s'] * 1000:.1f} ms in process, {hit['fresh_process_s'] * 1000:.1f} ms "
          f"from a fresh process (loader import included)")  # fmt: skip
    if "env" in res:
        e = res["env"]
        print(f"warm eval: {', '.join(f'{x:.2f}' for x in e['warm_eval_s'])} s; format_error step "
              f"{e['format_error_step_s'] * 1000:.1f} ms; env overhead on a cached correct step "
              f"{e['env_overhead_s'] * 1000:.1f} ms; evaluator overhead beyond timed calls "
              f"{e['evaluator_overhead_s']:.2f} s")  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
