"""The timed half of ``benchmarks/cuda_corpus.py``: a stratified sample built by ``load_inline`` and by musaenv.

Each build runs in a fresh process, its CPU seconds those of its whole process tree
(``benchmarks/cuda_build_speed.py``'s runners: ``load_inline`` with this CPU wheel's three stand-ins, musaenv's
``build_extension`` of the compile-only spec). First build: empty extension cache (musaenv) or build directory
(``load_inline``); cached: the same source again in the same place. The header store is warmed once per C++ flag
set (``musaenv warmup``, reported), as a long-running installation has it; a new binding signature is not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cuda_build_speed import _MUSAENV, _run, _warm_headers, plain
from benchmarks.cuda_corpus import Classified, medians, ratio
from musaenv import _env
from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.cuda.compile import _CUDA_PRELUDE
from musaenv.toolchains.cuda.fast import _device_step
from musaenv.toolchains.cuda.split import split_cuda

_DEVICE_LIMIT_S = 120  # a device unit is about a second of nvcc; this only bounds a pathological one


def device_fails(kw: dict[str, Any]) -> bool | None:
    """Does nvcc fail on the split's device unit of ``kw`` (the split's own device step, compile-only flags)?
    ``None`` when there is no toolkit or no split, or nvcc cannot open a header (one this machine lacks, such as
    ``cublas_v2.h``: no check here can judge that generation, musaenv calls it an infrastructure error)."""
    cuda_home = _env.cuda_home()
    spec = BuildSpec.from_load_inline({**kw, "name": "corpus"}, "cuda", compile_only=True).to_dict()
    split = split_cuda("\n".join(spec["cuda_sources"]), _CUDA_PRELUDE)
    if cuda_home is None or split is None:
        return None
    step = _device_step(spec, cuda_home, None)
    with tempfile.TemporaryDirectory(prefix="musaenv-corpus-device-") as tmp:
        (Path(tmp) / "musaenv_device.cu").write_text(split.device)
        try:
            proc = subprocess.run(step.command, cwd=tmp, capture_output=True, timeout=_DEVICE_LIMIT_S)
        except subprocess.TimeoutExpired:
            return None
    if b"cannot open source file" in proc.stdout + proc.stderr:
        return None
    return proc.returncode != 0


def pick(ok: list[Classified], bad: list[Classified], n: int) -> tuple[list[Classified], list[Classified], int]:
    """``n // 2`` kernel errors (in the pool's order, the first whose device unit nvcc fails) and the rest
    successes; also how many error candidates were prescreened."""
    errors, screened = [], 0
    for c in bad:
        if len(errors) >= n // 2:
            break
        screened += 1
        if device_fails(c.kwargs[0]):
            errors.append(c)
    return ok[: n - len(errors)], errors, screened


def _musaenv(kw: dict[str, Any], root: Path) -> dict[str, Any]:
    res = _run(_MUSAENV, [json.dumps(kw), str(root), "fast"], dict(os.environ))
    res["log"] = str(res.get("log", ""))[-300:]
    return res


def time_one(c: Classified, tag: str, work: Path) -> dict[str, Any]:
    """First build and cached rebuild of one generation by musaenv and by ``load_inline``."""
    kw = dict(c.kwargs[0])
    cuda = list(kw["cuda_sources"])
    kw["cuda_sources"] = [*cuda[:-1], cuda[-1] + f"\n// musaenv corpus benchmark {tag}\n"]  # nothing cached before
    kw["name"] = f"corpus_{tag}"
    root = work / f"ext_{tag}"
    row: dict[str, Any] = {"name": c.name, "compiled_upstream": c.compiled}
    row["musaenv_first"] = _musaenv(kw, root)
    row["musaenv_cached"] = _musaenv(kw, root)
    row["load_inline_first"] = plain(kw, work)
    row["load_inline_cached"] = plain(kw, work)
    shutil.rmtree(work / kw["name"], ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per stratum and the ratios the issue asks for (``load_inline`` / musaenv; errors / successes)."""

    judged = [r for r in rows if not r["musaenv_first"].get("infra")]  # a harness or machine failure is no verdict

    def med(group: str, run: str, key: str) -> float | None:
        return medians([r[run].get(key) for r in judged if r["stratum"] == group])

    out: dict[str, Any] = {}
    for g in ("success", "kernel_error"):
        out[g] = {f"{run}_{k}": med(g, run, k) for run in ("load_inline_first", "load_inline_cached", "musaenv_first",
                  "musaenv_cached") for k in ("cpu_s", "process_wall_s")}  # fmt: skip
        out[g]["n"] = sum(r["stratum"] == g for r in judged)
        out[g]["infra_error"] = sum(r["stratum"] == g for r in rows) - out[g]["n"]
        out[g]["split_tier"] = sum(r["stratum"] == g and r["musaenv_first"].get("tier") == "cuda_split" for r in judged)
    per_gen = [
        ratio(r["load_inline_first"]["cpu_s"], r["musaenv_first"]["cpu_s"]) for r in judged if r["stratum"] == "success"
    ]
    s, e = out["success"], out["kernel_error"]
    out["ratios"] = {
        "first_cpu_median_of_ratios": medians(per_gen),
        "first_cpu_success": ratio(s["load_inline_first_cpu_s"], s["musaenv_first_cpu_s"]),
        "first_wall_success": ratio(s["load_inline_first_process_wall_s"], s["musaenv_first_process_wall_s"]),
        "cached_cpu_vs_load_inline_first": ratio(s["load_inline_first_cpu_s"], s["musaenv_cached_cpu_s"]),
        "cached_wall_vs_load_inline_first": ratio(
            s["load_inline_first_process_wall_s"], s["musaenv_cached_process_wall_s"]
        ),
        "cached_cpu_vs_load_inline_cached": ratio(s["load_inline_cached_cpu_s"], s["musaenv_cached_cpu_s"]),
        "error_over_success_cpu": ratio(e["musaenv_first_cpu_s"], s["musaenv_first_cpu_s"]),
        "error_over_success_wall": ratio(e["musaenv_first_process_wall_s"], s["musaenv_first_process_wall_s"]),
        "load_inline_error_over_success_cpu": ratio(e["load_inline_first_cpu_s"], s["load_inline_first_cpu_s"]),
    }
    return out


def time_sample(
    ok: list[Classified], bad: list[Classified], n: int, tag: str, out: Path, results: dict[str, Any]
) -> dict[str, Any]:
    """Time ``n`` generations (stratified), writing ``results`` to ``out`` after each; the sample's record."""
    t = time.perf_counter()
    successes, errors, screened = pick(ok, bad, n)
    sample: dict[str, Any] = {"load_start": os.getloadavg(), "prescreened": screened,
                              "prescreen_s": round(time.perf_counter() - t, 1), "headers": {}, "rows": []}  # fmt: skip
    results["sample"] = sample
    print(f"sample: {len(successes)} successes, {len(errors)} kernel errors ({screened} prescreened)", flush=True)
    for flags in sorted({tuple(c.kwargs[0].get("extra_cflags") or ()) for c in successes + errors}):
        sample["headers"][" ".join(flags) or "(none)"] = _warm_headers(list(flags))
    with tempfile.TemporaryDirectory(prefix="musaenv-corpus-work-") as work:
        for i, (c, stratum) in enumerate([(c, "success") for c in successes] + [(c, "kernel_error") for c in errors]):
            row = {"stratum": stratum, **time_one(c, f"{tag}{i}", Path(work)), "load": os.getloadavg()}
            sample["rows"].append(row)
            m, p = row["musaenv_first"], row["load_inline_first"]
            print(f"{stratum:12s} {c.name:40s} load_inline {p['cpu_s']:6.1f} CPU s {p['process_wall_s']:6.1f} s "
                  f"built={p.get('built')} | musaenv {m['cpu_s']:5.1f} CPU s {m['process_wall_s']:5.1f} s "
                  f"ok={m.get('ok')} {m.get('tier')} | cached {row['musaenv_cached']['cpu_s']:4.1f} CPU s "
                  f"(load_inline {row['load_inline_cached']['cpu_s']:4.1f})", flush=True)  # fmt: skip
            out.write_text(json.dumps(results, indent=1))
    sample["load_end"] = os.getloadavg()
    sample["summary"] = summarize(sample["rows"])
    print(json.dumps(sample["summary"], indent=1))
    return sample
