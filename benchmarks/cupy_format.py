"""What does the CuPy candidate format cost to check without a GPU? Whole evaluations, as the env runs them.

For each CuPy candidate of ``tests/gpu/cupy_candidates.py`` (a unique comment in each kernel, so nothing is cached):
an evaluation on backend ``cupy`` through :class:`~musaenv.evaluator.local.LocalEvaluator` (static checks, a fresh
sandboxed worker, NVRTC inside it), reporting the verdict, ``compile_time_s`` (NVRTC's time for the candidate's
kernels) and the evaluation's wall time. Also: NVRTC's first compile in a fresh process (``import cupy``, loading
libnvrtc, the compile), and with ``--with-cuda`` the same ReLU as a ``load_inline`` CUDA candidate (the shipped
solution) checked compile-only on backend ``cuda`` with a fresh cache key, side by side.

Usage: ``python benchmarks/cupy_format.py [--with-cuda] [--repeats 3] [--out out/cupy_format.json]``.
Prints a table, writes JSON, never asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from musaenv.evaluator.local import LocalEvaluator  # noqa: E402
from musaenv.tasks.builtin import get_task, solution_source  # noqa: E402
from tests.gpu import cupy_candidates as cc  # noqa: E402

CASES = {
    "relu": ("l1_relu", cc.RELU_CUPY),
    "softmax": ("l1_softmax", cc.SOFTMAX_CUPY),
    "broken_relu": ("l1_relu", cc.BROKEN_RELU_CUPY),
}
_COLD = (
    "import time; t = time.perf_counter(); from musaenv.toolchains.cupy_nvrtc import nvrtc_compile; "
    "r = nvrtc_compile('extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.f; } // {tag}'); "
    "print(r.ok, round(time.perf_counter() - t, 4), r.seconds)"
)


def _fresh(source: str) -> str:
    """A unique comment inside the first kernel source, so no compile anywhere is a cache hit."""
    return source.replace('SRC = r"""', f'SRC = r"""// {uuid.uuid4().hex}\n', 1)


def evaluate(backend: str, task_id: str, source: str) -> dict[str, Any]:
    """One evaluation in a fresh evaluator (its worker start-up included in ``wall_s``)."""
    t = time.perf_counter()
    with LocalEvaluator(backend) as ev:
        r = ev.evaluate(get_task(task_id), source)
    return {
        "stage": r.stage.value,
        "compile_time_s": r.compile_time_s,
        "eval_time_s": round(r.eval_time_s or 0.0, 3),
        "wall_s": round(time.perf_counter() - t, 3),
    }


def cold_process() -> dict[str, Any]:
    """NVRTC's first compile in a fresh interpreter: imports, libnvrtc, compile."""
    t = time.perf_counter()
    code = _COLD.replace("{tag}", uuid.uuid4().hex)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    ok, inproc, compile_s = [*out.stdout.split(), "?", "?", "?"][:3]
    return {"ok": ok, "process_s": round(time.perf_counter() - t, 3), "import_and_compile_s": inproc,
            "compile_s": compile_s}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--with-cuda", action="store_true", help="also check the load_inline ReLU on backend cuda")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="out/cupy_format.json")
    args = ap.parse_args()
    results: dict[str, Any] = {"cold_process": [cold_process() for _ in range(args.repeats)], "cupy": {}}
    for name, (task_id, source) in CASES.items():
        results["cupy"][name] = [evaluate("cupy", task_id, _fresh(source)) for _ in range(args.repeats)]
    if args.with_cuda:
        cuda = solution_source("l1_relu", "cuda")
        fresh = cuda.replace('CUDA = r"""', f'CUDA = r"""// {uuid.uuid4().hex}\n', 1)
        results["cuda_load_inline_relu"] = [evaluate("cuda", "l1_relu", fresh)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"{'case':28s} {'stage':14s} {'compile_s':>10s} {'eval_s':>8s} {'wall_s':>8s}")
    rows = [*results["cupy"].items(), *((k, v) for k, v in results.items() if k.startswith("cuda"))]
    for name, runs in rows:
        for r in runs:
            c = r["compile_time_s"] or 0.0
            print(f"{name:28s} {r['stage']:14s} {c:10.3f} {r['eval_time_s']:8.3f} {r['wall_s']:8.3f}")
    for r in results["cold_process"]:
        print(f"fresh process: {r}")


if __name__ == "__main__":
    main()
