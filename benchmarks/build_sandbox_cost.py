"""What does the build sandbox cost? The same cold builds with and without it, interleaved in one run.

Each round builds a fresh variant of the l1_relu solution (a unique comment, so nothing is cached) twice: once
confined (pid namespace, Landlock, seccomp, rlimits: :mod:`musaenv.isolation.build_jail`) and once with
``configure_builds(confine=False)``, alternating which goes first. Precompiled headers are warmed before the first
round so both arms measure a typical cached-flags build. Also: the confinement step alone (fork + namespace +
sandbox entry around an empty build) and the cache-hit verification (sha256 of the module against its sealed
manifest).

Usage: ``python benchmarks/build_sandbox_cost.py [--rounds 5] [--out out/build_sandbox_cost.json]``. Writes JSON,
prints a table, never asserts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from core_costs import ours_build, relu_cpp

from musaenv.isolation.build_jail import run_confined
from musaenv.toolchains.loader import BuildSpec, build_extension, configure_builds


def _jail_only(reps: int) -> list[float]:
    """Milliseconds of run_confined around a build that does nothing (fork, unshare, sandbox entry, reap)."""
    import os

    out = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            pid = os.fork()
            if pid == 0:  # run_confined ties itself to its parent and enters a sandbox: do it in a child
                code = run_confined(lambda report: 0, Path(d), parent_pid=os.getppid(), writable=[], cpu_s=10)
                os._exit(code)
            os.waitpid(pid, 0)
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def _hit_ms(root: Path, reps: int) -> list[float]:
    cpp = relu_cpp("hit")
    spec = BuildSpec.from_load_inline({"cpp_sources": cpp, "functions": ["relu_forward"], "extra_cflags": ["-O3"]},
                                      "cpu")  # fmt: skip
    build_extension(spec, timeout_s=1800, root=root)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        assert build_extension(spec, timeout_s=1800, root=root).cached
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="out/build_sandbox_cost.json")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="musaenv-sandbox-cost-"))
    ours_build(relu_cpp("warm-" + uuid.uuid4().hex), "fast", root)  # precompiled headers for these flags
    rows: dict[str, list[dict[str, Any]]] = {"confined": [], "unconfined": []}
    for r in range(args.rounds):
        order = ("confined", "unconfined") if r % 2 == 0 else ("unconfined", "confined")
        for arm in order:
            configure_builds(confine=arm == "confined")
            rows[arm].append(ours_build(relu_cpp(f"{arm}-{uuid.uuid4().hex}"), "fast", root))
    configure_builds(confine=True)
    summary = {arm: {k: statistics.median(x[k] for x in v) for k in ("wall_s", "cpu_s")} for arm, v in rows.items()}
    jail = _jail_only(10)
    hits = _hit_ms(root, 20)
    result = {"rounds": rows, "median": summary, "jail_only_ms": jail, "verified_hit_ms": hits}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    c, u = summary["confined"], summary["unconfined"]
    print(f"{'':<14}{'wall s':>10}{'cpu s':>10}   (median of {args.rounds} cold builds, cached flags)")
    print(f"{'confined':<14}{c['wall_s']:>10.2f}{c['cpu_s']:>10.2f}")
    print(f"{'unconfined':<14}{u['wall_s']:>10.2f}{u['cpu_s']:>10.2f}")
    print(f"ratio confined/unconfined wall {c['wall_s'] / u['wall_s']:.3f}, cpu {c['cpu_s'] / u['cpu_s']:.3f}")
    print(f"confinement alone: median {statistics.median(jail):.1f} ms (max {max(jail):.1f})")
    print(f"verified cache hit: median {statistics.median(hits):.2f} ms (max {max(hits):.2f})")


if __name__ == "__main__":
    main()
