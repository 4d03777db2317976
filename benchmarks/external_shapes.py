"""How well are KernelBench files verified? Shapes derived per tier for a checkout, with budgets and failures.

Takes a KernelBench checkout that you fetched yourself (nothing of it is part of musaenv), e.g.::

    git clone https://github.com/ScalingIntelligence/KernelBench /tmp/kb
    python benchmarks/external_shapes.py /tmp/kb/KernelBench --levels 1 2 3 --out out/external_shapes.json

Derives every file's tiers from scratch (a private cache directory, so nothing cached is reused unless
``--cache`` is given), then reports: how many files get at least two validated shapes per tier, the cpu tier's
bytes per call and reference forward times (min/median/max), derivation time per file, and every file with
fewer than two cpu shapes, with why. References run only at derived cpu sizes and on the ``meta`` device;
each file is time-boxed (``ShapeConfig.file_timeout_s``). Prints a summary and writes JSON; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from musaenv.tasks.derive import ShapeConfig
from musaenv.tasks.external import derivation_for
from musaenv.tasks.probe import ProbeClient
from musaenv.tasks.task import load_task_file


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _row(path: Path, root: Path, config: ShapeConfig, client: ProbeClient) -> dict[str, Any]:
    task = load_task_file(path, task_id=str(path.relative_to(root).with_suffix("")))
    start = time.perf_counter()
    d = derivation_for(task.source, config, client)
    seconds = time.perf_counter() - start
    cpu = d.info.get("cpu", [])
    return {
        "id": task.id,
        "level": task.level,
        "seconds": seconds,
        "shapes": d.shapes,
        "n_shapes": {tier: len(d.shapes.get(tier, [])) for tier in ("cpu", "gpu")},
        "cpu_bytes": [i["input_bytes"] + (i["output_bytes"] or 0) + (i["state_bytes"] or 0) for i in cpu],
        "cpu_input_bytes": [i["input_bytes"] for i in cpu],
        "cpu_forward_ms": [i["forward_ms"] for i in cpu if i.get("forward_ms") is not None],
        "warnings": d.warnings,
        "notes": d.notes,
    }


def summarise(rows: list[dict[str, Any]], config: ShapeConfig) -> dict[str, Any]:
    """Counts and distributions over all files (see the module docstring)."""
    n = len(rows)
    two = {tier: sum(1 for r in rows if r["n_shapes"][tier] >= 2) for tier in ("cpu", "gpu")}
    timing = [r["cpu_forward_ms"][0] for r in rows if r["n_shapes"]["cpu"] and r["cpu_forward_ms"]]
    inputs = [r["cpu_input_bytes"][0] for r in rows if r["cpu_input_bytes"]]
    return {
        "files": n,
        "two_or_more_shapes": two,
        "two_or_more_shapes_pct": {k: (100.0 * v / n if n else 0.0) for k, v in two.items()},
        "cpu_timing_shape_forward_ms": _stats(timing),
        "cpu_timing_shape_input_bytes": _stats([float(b) for b in inputs]),
        "derivation_seconds": _stats([r["seconds"] for r in rows]),
        "total_seconds": sum(r["seconds"] for r in rows),
        "failures": [
            {"id": r["id"], "warnings": r["warnings"], "why": r["notes"]} for r in rows if r["n_shapes"]["cpu"] < 2
        ],
        "budgets": config.to_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path, help="the KernelBench folder of a checkout (holding level1, level2, ...)")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--out", type=Path, default=Path("out/external_shapes.json"))
    p.add_argument("--cache", action="store_true", help="reuse (and fill) the normal cache instead of a fresh one")
    p.add_argument("--limit", type=int, default=0, help="at most this many files per level (0: all)")
    args = p.parse_args(argv)
    if not args.cache:
        os.environ["MUSAENV_CACHE_DIR"] = tempfile.mkdtemp(prefix="musaenv-shapes-bench-")
    config = ShapeConfig()
    rows = []
    with ProbeClient(config.probe_memory_mb) as client:
        for level in args.levels:
            files = sorted((args.root / f"level{level}").glob("*.py"))
            for f in files[: args.limit or None]:
                rows.append(_row(f, args.root, config, client))
                r = rows[-1]
                print(f"{r['id']:<70} {r['seconds']:6.2f} s  cpu {r['n_shapes']['cpu']} gpu {r['n_shapes']['gpu']}"
                      f"  {' '.join(r['warnings'])}", file=sys.stderr, flush=True)  # fmt: skip
        restarts = client.restarts
    summary = summarise(rows, config)
    summary.update(host=platform.node(), python=platform.python_version(), worker_restarts=restarts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "files": rows}, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "failures"}, indent=1))
    print(f"{len(summary['failures'])} files with fewer than two cpu shapes:")
    for f in summary["failures"]:
        print(f"  {f['id']}: {f['warnings']} {' / '.join(f['why'])[:400]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
