"""How fast can a precompiled header make a unit at all? The floor of GCC's per-unit cost, by header (issue #18).

GCC writes a precompiled header before it instantiates the templates the header's inline functions use: every
unit that includes it instantiates them again at its end (``-ftime-report``: "template instantiation"), and maps
the whole header image (~0.4 GB for ``torch/types.h``, ~100k page faults). So a unit that includes a header costs
at least the *empty unit* with that header's PCH, whatever the candidate writes. This measures it, with torch's
own compile flags at ``-O3``, for the headers a candidate's code could be compiled against:

* ``ATen/core/Tensor.h`` (``at::Tensor`` and its methods only: no ``torch::`` namespace, no factory functions);
* ``ATen/ATen.h``; ``ATen/ATen.h`` + ``torch/csrc/autograd/generated/variable_factories.h`` (``torch::empty_like``,
  ``torch::zeros``...: what nearly every candidate calls);
* ``torch/types.h`` (what musaenv's split tier uses: the above + ``torch/library.h`` + autograd's ``variable.h``);
* ``torch/library.h`` alone;

then the l1_relu candidate's unit against ``torch/types.h``'s PCH (the cached-flags build's compile) and torch's
whole ``main.cpp`` without a PCH (what plain ``load_inline`` compiles; its link and ninja add ~1 s). The ratio of
the last to the sum of the relu unit and ~0.2 s for musaenv's link and tools is the most a cached-flags build can
gain with GCC and torch's headers on this machine.

Usage: ``python benchmarks/pch_floor.py [--reps 3] [--out out/pch_floor.json]``. CPU seconds (user+sys of the
compiler), the median of ``--reps``. Never asserts.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

HEADERS = {
    "ATen/core/Tensor.h": ["ATen/core/Tensor.h"],
    "ATen/ATen.h": ["ATen/ATen.h"],
    "ATen/ATen.h + variable_factories.h": ["ATen/ATen.h", "torch/csrc/autograd/generated/variable_factories.h"],
    "torch/types.h": ["torch/types.h"],
    "torch/library.h": ["torch/library.h"],
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    c0, t0 = _cpu(), time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {p.stderr[-1500:]}")
    return _cpu() - c0, time.perf_counter() - t0, p.stderr


def _instantiation(report: str) -> float | None:
    m = re.search(r"^\s*template instantiation\s*:\s*([\d.]+)", report, re.MULTILINE)
    return float(m.group(1)) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="out/pch_floor.json")
    args = ap.parse_args()
    from core_costs import relu_cpp

    from musaenv.toolchains.cpp.compiler import torch_flags

    work = Path(tempfile.mkdtemp(prefix="musaenv-pch-floor-"))
    flags = torch_flags(work / "cache", "musaenv_floor", ["-O3"], [], [])
    base = [*flags.cxx, *(f for f in flags.cflags if not f.startswith("-DTORCH_EXTENSION_NAME="))]
    (work / "empty.cpp").write_text("int musaenv_floor() { return 1; }\n")
    rows: list[dict[str, Any]] = []
    print(f"{'header':<38}{'PCH MB':>8}{'build s':>9}{'empty unit s':>14}{'instantiation s':>17}")
    for label, includes in HEADERS.items():
        d = work / re.sub(r"\W+", "_", label)
        d.mkdir()
        (d / "h.h").write_text("".join(f"#include <{h}>\n" for h in includes))
        build, _, _ = _run([*base, "-x", "c++-header", "h.h", "-o", "h.h.gch"], d)
        use = [*base, "-Winvalid-pch", "-include", str(d / "h.h"), "-c", str(work / "empty.cpp"), "-o", "e.o"]
        cpu = statistics.median(_run(use, d)[0] for _ in range(args.reps))
        inst = _instantiation(_run([*use, "-ftime-report"], d)[2])
        size = (d / "h.h.gch").stat().st_size / 1e6
        rows.append({"header": label, "pch_mb": size, "pch_build_cpu_s": build, "empty_unit_cpu_s": cpu,
                     "template_instantiation_s": inst})  # fmt: skip
        print(f"{label:<38}{size:>8.0f}{build:>9.1f}{cpu:>14.2f}{inst if inst is not None else float('nan'):>17.2f}")
    # the cached-flags build's compile (the l1_relu unit, torch/types.h's PCH) and plain load_inline's unit
    types = work / "torch_types_h"
    overlay = work / "overlay" / "torch"
    overlay.mkdir(parents=True)
    (overlay / "extension.h").write_text("#pragma once\n#include <torch/types.h>\n")
    (work / "relu.cpp").write_text("#include <torch/extension.h>\n" + relu_cpp("floor"))
    unit = [*base, "-I", str(work / "overlay"), "-Winvalid-pch", "-include", str(types / "h.h"), "-c", "relu.cpp",
            "-o", "relu.o"]  # fmt: skip
    relu = statistics.median(_run(unit, work)[0] for _ in range(args.reps))
    main_cpp = (work / "relu.cpp").read_text() + (
        '\nPYBIND11_MODULE(musaenv_floor, m) { m.def("relu_forward", torch::wrap_pybind_function(relu_forward), '
        '"relu_forward"); }\n'
    )
    (work / "main.cpp").write_text(main_cpp)
    plain, _, _ = _run([*base, "-c", "main.cpp", "-o", "main.o"], work)
    ceiling = plain / (relu + 0.2)
    print(
        f"l1_relu unit, torch/types.h PCH: {relu:.2f} s; torch's main.cpp, no PCH: {plain:.1f} s; "
        f"ceiling of a cached-flags build: {ceiling:.1f}x"
    )
    report = {"rows": rows, "relu_unit_cpu_s": relu, "plain_main_cpu_s": plain, "ceiling_x": ceiling}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
