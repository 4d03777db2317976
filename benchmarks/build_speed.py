"""C++ build speed against plain ``load_inline``, side by side in one run, from a fresh cache (issue #18).

1. *Fresh install, flags as they come*: distinct l1_relu candidates (a unique comment each, so nothing is cached)
   with the flag lists real KernelBench generations use, each built by plain ``load_inline`` in a fresh process
   and by musaenv's :func:`build_extension` into a cache that starts empty (no ``musaenv warmup``): the first
   candidate pays for the binding objects; a flag set never seen compiles without a header (built in the
   background for the next one).
2. ``musaenv warmup`` (timed), then the same flag mix again (*cached flags*) and flag lists warm-up never saw but
   that key alike (``-O3 -DBLOCK=128 -funroll-loops``), that take their extensions by pragma after ``-O3``'s header
   (``-O3 -mavx2 -mfma``, ``-O3 -mavx512f``) or that do not (``-O3 -ffast-math``: a key of its own).
3. *Compile errors*: a syntax error against plain ``load_inline`` of it, and an undeclared name against a success
   of the same flags built right after it.
4. *Evaluations per minute* on a verdict mix (a third each: compile error, incorrect, correct): musaenv's pool
   (started once) against the naive one-process KernelBench-style harness of ``benchmarks/throughput.py``.

CPU seconds (children's user+sys) are the steadier measure on a shared machine; both are reported, with the load
average. What a build leaves to the background (binding objects on a fresh install, its flags' header) is waited
for after each row and its CPU reported apart (``bg``); the common flag sets are not built in the background here
(warm-up builds two of them, timed). A flag set's first build goes without a header, as it does before the
background build ends.

Usage: ``python benchmarks/build_speed.py [--evals 3] [--out out/build_speed.json]``. Never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Flag lists of real KernelBench generations. Phase 1 meets them on a fresh install; phase 2 after warm-up, plus
# lists warm-up never saw: one that keys like -O3, one that does not (a header of its own).
FRESH = (["-O3"], ["-O3", "-fopenmp"], [""])
CACHED = (
    ["-O3"],
    ["-O3", "-fopenmp"],
    ["-O3", "-DBLOCK=128", "-funroll-loops"],
    ["-O2", "-fopenmp", "-DTILE=32"],
    ["-O3", "-mavx2", "-mfma"],  # extensions: -O3's header by pragma, once its text is checked (inline, first sight)
    ["-O3", "-mavx512f"],  # more extensions: the check's preprocessing of -O3's header is kept, one more to run
    ["-O3", "-ffast-math"],  # a key of its own: compiled without a header, its header built in the background
)
WARM = (("-O3",), ("-O3", "-fopenmp"))  # the common sets this run warms (``musaenv warmup`` does five)
_PLAIN = """
import json, sys, time, torch.utils.cpp_extension as ce
src, d, flags = open(sys.argv[1]).read(), sys.argv[2], json.loads(sys.argv[4])
t = time.perf_counter()
try:
    ce.load_inline(name="plain_" + sys.argv[3], cpp_sources=src, functions=["relu_forward"], extra_cflags=flags,
                   build_directory=d, verbose=False)
    ok = True
except Exception:
    ok = False
print(json.dumps([time.perf_counter() - t, ok]))
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _load() -> float:
    return os.getloadavg()[0]


def plain(cpp: str, flags: list[str]) -> dict[str, Any]:
    """Plain ``load_inline`` in a fresh process (no cache): wall of the call, CPU of the process."""
    with tempfile.TemporaryDirectory(prefix="plain-") as d:
        (Path(d) / "src.cpp").write_text(cpp)
        (Path(d) / "build").mkdir()
        cpu0 = _cpu()
        out = subprocess.run([sys.executable, "-c", _PLAIN, f"{d}/src.cpp", f"{d}/build", uuid.uuid4().hex[:8],
                              json.dumps(flags)], capture_output=True, text=True, check=True)  # fmt: skip
        wall, ok = json.loads(out.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "cpu_s": _cpu() - cpu0, "ok": ok, "load": _load()}


def ours(cpp: str, flags: list[str]) -> dict[str, Any]:
    """musaenv's build (a cold one: the source is new), wall and CPU of the builder."""
    from musaenv.toolchains.loader import BuildSpec, build_extension

    spec = BuildSpec.from_load_inline({"cpp_sources": cpp, "functions": ["relu_forward"], "extra_cflags": flags},
                                      "cpu")  # fmt: skip
    from musaenv.toolchains.warmup import wait_background

    cpu0, t0 = _cpu(), time.perf_counter()
    res = build_extension(spec, timeout_s=1800)
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    steps = [s.get("step") for s in res.extra.get("steps", []) if isinstance(s, dict)]
    bg0 = _cpu()
    wait_background()  # what it left to the background, counted apart (the build did not wait for it)
    return {"wall_s": wall, "cpu_s": cpu, "ok": res.ok, "tier": res.extra.get("tier"), "steps": steps,
            "load": _load(), "background_cpu_s": _cpu() - bg0}  # fmt: skip


def _pair(label: str, cpp_of: Any, flags: list[str], rows: list[dict[str, Any]]) -> None:
    p, o = plain(cpp_of(), flags), ours(cpp_of(), flags)
    row = {"case": label, "flags": flags, "plain": p, "ours": o,
           "x_wall": p["wall_s"] / o["wall_s"], "x_cpu": p["cpu_s"] / max(o["cpu_s"], 1e-9)}  # fmt: skip
    rows.append(row)
    shown = " ".join(flags) or '[""]'
    print(f"{label:<22}{shown:<34}{p['wall_s']:>8.1f}{o['wall_s']:>8.1f}{p['cpu_s']:>8.1f}"
          f"{o['cpu_s']:>8.1f}{row['x_wall']:>7.1f}x{row['x_cpu']:>6.1f}x  {o['tier']} ok={o['ok']}/{p['ok']} "
          f"load {o['load']:.1f} bg {o['background_cpu_s']:.0f} {','.join(o['steps'])}", flush=True)  # fmt: skip


def builds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Phases 1-3."""
    from core_costs import relu_cpp

    from musaenv.toolchains.warmup import wait_background, warmup

    def fresh() -> str:
        return relu_cpp(uuid.uuid4().hex)

    def broken() -> str:
        return relu_cpp(uuid.uuid4().hex) + "\nint broken_value = ;\n"

    def undeclared() -> str:
        return relu_cpp(uuid.uuid4().hex) + "\ntorch::Tensor twice(torch::Tensor x) { return no_such_fn(x); }\n"

    print(f"{'case':<22}{'flags':<34}{'plain s':>8}{'ours s':>8}{'plain c':>8}{'ours c':>8}{'x wall':>8}{'x cpu':>7}")
    for flags in FRESH:
        _pair("fresh install", fresh, flags, rows)
    wait_background()  # the headers phase 1 went without (built behind it)
    t0, cpu0 = time.perf_counter(), _cpu()
    warmup(WARM, full=False, say=lambda line: print("  warmup " + line, flush=True))
    warm = {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu() - cpu0}
    print(f"musaenv warmup: {warm['wall_s']:.0f} s wall, {warm['cpu_s']:.0f} s CPU")
    for flags in CACHED:
        _pair("after warmup", fresh, flags, rows)
    _pair("compile error", broken, ["-O3"], rows)
    _pair("compile error", broken, ["-O3", "-fopenmp"], rows)
    for flags in (["-O3"], ["-O3", "-fopenmp"]):  # an undeclared name against a success right after, same flags
        bad, good = ours(undeclared(), flags), ours(fresh(), flags)
        rows.append({"case": "undeclared name", "flags": flags, "ours": bad, "success": good,
                     "x_of_success": bad["cpu_s"] / max(good["cpu_s"], 1e-9)})  # fmt: skip
        print(f"undeclared name {' '.join(flags):<24} error {bad['wall_s']:.1f} s / {bad['cpu_s']:.1f} CPU s "
              f"(ok={bad['ok']}, {bad['tier']}), success {good['wall_s']:.1f} s / {good['cpu_s']:.1f} CPU s: "
              f"{rows[-1]['x_of_success']:.2f}x of a success (CPU), load {bad['load']:.1f}", flush=True)  # fmt: skip
    wait_background()
    return warm


def evals(n: int) -> dict[str, Any]:
    """Phase 4: the verdict mix through musaenv's pool and through the naive harness."""
    from throughput import _BASELINE, CONFIG, variant

    from musaenv.evaluator.pool import EvalRequest, EvaluatorPool
    from musaenv.tasks.builtin import get_task

    task = get_task("l1_relu")

    def cand(i: int) -> str:
        code = variant(uuid.uuid4().hex[:12])
        if i % 3 == 0:
            code = code.replace("// variant", "int broken_value = ;\n// variant", 1)
        elif i % 3 == 1:
            code = code.replace("v > 0.0f ? v : 0.0f", "v > 0.0f ? v : 0.5f * v", 1)
        return code

    ref = task.render_source(task.shapes_for("cpu")[0])
    jobs = [{"ref": ref, "cand": cand(i)} for i in range(n)]
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(jobs, f)
        f.flush()
        proc = subprocess.run([sys.executable, "-c", _BASELINE, f.name], capture_output=True, text=True, check=True)
    base = json.loads(proc.stdout.strip().splitlines()[-1])
    base_s = sum(r["total_s"] for r in base)
    responses = [f"```python\n{cand(i)}\n```" for i in range(n)]
    with EvaluatorPool("cpu", CONFIG, compile_workers=2, max_in_flight=2) as pool:
        t0 = time.perf_counter()
        res = pool.evaluate_many([EvalRequest(task, r, seed=i) for i, r in enumerate(responses)], progress=False)
        ours_s = time.perf_counter() - t0
    out = {"n": n, "naive_s": base_s, "naive_per_min": 60 * n / base_s, "naive_stages": [r["stage"] for r in base],
           "ours_s": ours_s, "ours_per_min": 60 * n / ours_s, "ours_stages": [r.stage.value for r in res],
           "load": _load()}  # fmt: skip
    out["x"] = out["ours_per_min"] / out["naive_per_min"]
    print(f"evaluations/min on the verdict mix (n={n}): naive {out['naive_per_min']:.2f} ({base_s:.0f} s), "
          f"musaenv pool {out['ours_per_min']:.2f} ({ours_s:.0f} s): {out['x']:.1f}x; stages ours "
          f"{out['ours_stages']} naive {out['naive_stages']}")  # fmt: skip
    return out


def main() -> None:
    """Run every phase from a fresh cache; print tables; write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--evals", type=int, default=3, help="candidates in the verdict mix (0: skip)")
    ap.add_argument("--out", default="out/build_speed.json")
    args = ap.parse_args()
    os.environ["MUSAENV_CACHE_DIR"] = tempfile.mkdtemp(prefix="musaenv-build-speed-")  # a fresh install
    # Background builds of what a build went without (binding objects, its header), not the common flag sets
    # (warm-up builds those, timed): each row waits for them after its build and counts their CPU apart.
    os.environ["MUSAENV_BACKGROUND_WARMUP"] = "wanted"
    print(f"cache {os.environ['MUSAENV_CACHE_DIR']}, {os.cpu_count()} cores, load {os.getloadavg()}")
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {"warmup": builds(rows), "rows": rows, "cores": os.cpu_count()}
    if args.evals:
        report["evals"] = evals(args.evals)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
