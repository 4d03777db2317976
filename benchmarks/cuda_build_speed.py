"""How fast is a CUDA candidate checked without a GPU? musaenv's compile-only check against ``load_inline``'s own
build of the same source, side by side in one run, and CuPy's NVRTC compile per kernel.

For each candidate (KernelBench's own prompt example and shipped CUDA solutions, each with a unique comment so
nothing is cached):

* ``load_inline``: torch's own build of the sources in a fresh process (``TORCH_CUDA_ARCH_LIST=9.0``; this CPU wheel
  of torch needs three things of the environment to finish, none of the candidate: ``CUDA_HOME``, the c10/cuda
  define and empty stand-ins for ``libc10_cuda``/``libtorch_cuda``, as ``tests/fidelity/truth.py`` does).
* ``musaenv``: ``build_extension`` of the compile-only spec in a fresh process with an empty extension cache (no
  cached verdict), default build mode: the CUDA split (:mod:`musaenv.toolchains.cuda.fast`) when it applies.
* ``full`` (``--full``): the same check with build mode ``torch``: the unsplit check of the source as written.
* a kernel error (a syntax error in an extra kernel) in the first candidate, musaenv's check only.

The run uses a fresh cache (``--cache DIR`` to reuse one). Per candidate, before its timed runs: ``musaenv warmup``
of its C++ flags (the ``types`` header and binding objects, once per installation; timed and reported, CPU of the
builders), then one check of another copy (``warmup`` row: a new binding signature is compiled once), then the
timed check. A background build a one-shot process leaves ends with it, so without the warm-up every check of a
fresh cache would compile without a header. ``new key`` (first candidate only): the same check with ``-mavx2``
added to its C++ flags, a key no header exists for (what a candidate with never-seen target options costs).
CuPy: each kernel of the CuPy variants compiled by NVRTC through CuPy (cold first call, then warm), without a GPU.

Usage: ``python benchmarks/cuda_build_speed.py [--full] [--candidates NAME ...] [--out out/cuda_build_speed.json]``.
Prints a table, writes JSON, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from musaenv import _env

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = {
    "kernelbench_add": ROOT / "tests/data/port/elementwise_add.cuda.py",
    "l1_softmax": ROOT / "musaenv/tasks/solutions/cuda/l1_softmax.py",
    "l2_add_layernorm": ROOT / "musaenv/tasks/solutions/cuda/l2_add_layernorm.py",
}

_PLAIN = """
import json, os, sys, time
import torch.utils.cpp_extension as ce
ce.CUDA_HOME = os.environ["CUDA_HOME"]
kw, d = json.loads(sys.argv[1]), sys.argv[2]
t = time.perf_counter()
try:
    ce.load_inline(build_directory=d, verbose=False, **kw)
except Exception as e:  # the import needs a CUDA build of torch; the build itself is what is timed
    pass
print("RESULT", json.dumps({"seconds": time.perf_counter() - t,
                            "built": os.path.exists(os.path.join(d, kw["name"] + ".so"))}))
"""

_MUSAENV = """
import json, sys
from pathlib import Path
from musaenv.toolchains.loader import BuildSpec, build_extension, configure_builds
kw, root, mode = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
configure_builds(mode=mode)
out = build_extension(BuildSpec.from_load_inline(kw, "cuda", compile_only=True), timeout_s=900, root=root)
steps = out.extra.get("steps") or []
print("RESULT", json.dumps({"seconds": out.seconds, "ok": out.ok, "infra": out.infra_error,
                            "tier": "cuda_split" if any(s.get("name") == "device" for s in steps) else "full",
                            "log": out.log[-600:]}))
"""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def load_inline_kwargs(path: Path, tag: str) -> dict[str, Any]:
    """The keyword arguments the candidate file passes to ``load_inline``, with a unique comment in its sources."""
    import torch.utils.cpp_extension as ce

    captured: dict[str, Any] = {}

    class _Stop(Exception):
        pass

    def capture(**kw: Any) -> None:
        captured.update(kw)
        raise _Stop

    original, ce.load_inline = ce.load_inline, capture  # type: ignore[assignment]
    try:
        runpy.run_path(str(path))
    except _Stop:
        pass
    finally:
        ce.load_inline = original
    cuda = captured["cuda_sources"]
    cuda = [cuda] if isinstance(cuda, str) else list(cuda)
    captured["cuda_sources"] = [*cuda[:-1], cuda[-1] + f"\n// musaenv benchmark {tag}\n"]
    captured["name"] = f"bench_{tag}"
    captured.pop("verbose", None)
    return captured


def _run(code: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    before, t = _children_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - t, _children_cpu() - before
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    res: dict[str, Any] = json.loads(lines[-1][7:]) if lines else {"error": proc.stderr[-2000:]}
    return {**res, "process_wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def plain(kw: dict[str, Any], work: Path) -> dict[str, Any]:
    """torch's ``load_inline`` build of the sources in a fresh process."""
    cuda_home = _env.cuda_home()
    stubs = work / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "empty.c").write_text("")
    for lib in ("c10_cuda", "torch_cuda"):
        subprocess.run(["cc", "-shared", "-o", str(stubs / f"lib{lib}.so"), str(stubs / "empty.c")], check=True)
    env = {**os.environ, "CUDA_HOME": str(cuda_home), "TORCH_CUDA_ARCH_LIST": "9.0",
           "NVCC_APPEND_FLAGS": "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE",
           "LIBRARY_PATH": os.pathsep.join([str(stubs), os.environ.get("LIBRARY_PATH", "")])}  # fmt: skip
    build = work / kw["name"]
    build.mkdir(parents=True, exist_ok=True)
    return _run(_PLAIN, [json.dumps(kw), str(build)], env)


def _warm_headers(cflags: list[str]) -> dict[str, Any]:
    """``musaenv warmup`` of one C++ flag set (types header and binding objects), wall and builders' CPU."""
    from musaenv.toolchains.warmup import warmup

    before, t = _children_cpu(), time.perf_counter()
    rows = warmup([tuple(cflags)], full=False, say=lambda line: None)
    return {"wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(_children_cpu() - before, 1),
            "ok": all(r.get("ok") for r in rows)}  # fmt: skip


def musaenv_check(kw: dict[str, Any], mode: str = "fast") -> dict[str, Any]:
    """musaenv's compile-only check in a fresh process, empty extension cache (warm precompiled headers)."""
    with tempfile.TemporaryDirectory(prefix="musaenv-cuda-bench-") as root:
        return _run(_MUSAENV, [json.dumps(kw), root, mode], dict(os.environ))


CUPY_KERNELS = {
    "add": r"""extern "C" __global__ void add(const float* a, const float* b, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}""",
    "softmax_row": r"""extern "C" __global__ void softmax_row(const float* x, float* out, int cols) {
    __shared__ float red[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float m = -3.402823466e+38f;  // NVRTC has no math.h: no INFINITY
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (blockDim.x + 31) / 32; ++w) m = fmaxf(m, red[w]);
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(long long)blockIdx.x * cols + c] = expf(xr[c] - m) / s;
}""",
    "tiled_matmul": r"""template <int T> __device__ void tile(const float* a, const float* b, float* c, int n) {
    __shared__ float as[T][T], bs[T][T];
    int r = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < n; k0 += T) {
        as[threadIdx.y][threadIdx.x] = (r < n && k0 + threadIdx.x < n) ? a[r * n + k0 + threadIdx.x] : 0.f;
        bs[threadIdx.y][threadIdx.x] = (col < n && k0 + threadIdx.y < n) ? b[(k0 + threadIdx.y) * n + col] : 0.f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    if (r < n && col < n) c[r * n + col] = acc;
}
extern "C" __global__ void tiled_matmul(const float* a, const float* b, float* c, int n) { tile<16>(a, b, c, n); }""",
}


def cupy_compile() -> dict[str, Any]:
    """Each CuPy kernel compiled by NVRTC through CuPy for sm_90 without a GPU: cold first call, then warm."""
    from musaenv.toolchains.cupy_nvrtc import nvrtc_compile

    out: dict[str, Any] = {}
    for i, (name, src) in enumerate(CUPY_KERNELS.items()):
        t = time.perf_counter()
        res = nvrtc_compile(src + f"\n// {uuid.uuid4().hex}\n", arch=90)
        out[name] = {"ok": res.ok, "seconds": round(time.perf_counter() - t, 4), "first": i == 0, "log": res.log[:300]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="also time the unsplit compile-only check")
    ap.add_argument("--out", default="out/cuda_build_speed.json")
    ap.add_argument("--no-error", dest="error", action="store_false", help="skip the kernel-error check")
    ap.add_argument("--candidates", nargs="*", default=list(CANDIDATES), choices=list(CANDIDATES))
    ap.add_argument("--cache", help="musaenv cache dir to use (default: a fresh one)")
    args = ap.parse_args()
    os.environ["MUSAENV_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="musaenv-cuda-bench-cache-")
    print(f"cache {os.environ['MUSAENV_CACHE_DIR']}, load {os.getloadavg()}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    results: dict[str, Any] = {"cupy": cupy_compile(), "candidates": {}}
    print("CuPy NVRTC compile per kernel:", json.dumps(results["cupy"]))
    with tempfile.TemporaryDirectory(prefix="musaenv-plain-cuda-") as work:
        for name in args.candidates:
            path = CANDIDATES[name]
            kw = load_inline_kwargs(path, f"{tag}{name}")
            headers = _warm_headers(list(kw.get("extra_cflags") or []))
            warm = musaenv_check(load_inline_kwargs(path, f"{tag}w{name}"))
            row = {
                "headers": headers,
                "warmup": warm,
                "musaenv": musaenv_check(kw),
                "load_inline": plain(kw, Path(work)),
            }
            if name == args.candidates[0]:
                new_key = load_inline_kwargs(path, f"{tag}n{name}")
                new_key["extra_cflags"] = [*(new_key.get("extra_cflags") or []), "-mavx2"]
                row["new_key"] = musaenv_check(new_key)
                row["new_key_load_inline"] = plain(new_key, Path(work))
            if args.full:
                row["full"] = musaenv_check(load_inline_kwargs(path, f"{tag}f{name}"), mode="torch")
            results["candidates"][name] = row
            m, p = row["musaenv"], row["load_inline"]
            ratio = p.get("seconds", 0) / m["seconds"] if m.get("seconds") else float("nan")
            cpu_ratio = p["cpu_s"] / m["cpu_s"] if m["cpu_s"] else float("nan")
            print(f"{name:18s} load_inline {p.get('seconds', float('nan')):7.1f} s ({p['cpu_s']:6.1f} CPU s) | "
                  f"musaenv {m.get('seconds', float('nan')):6.1f} s ({m['cpu_s']:5.1f} CPU s, {m.get('tier')}, "
                  f"ok={m.get('ok')}) | {ratio:4.1f}x wall, {cpu_ratio:4.1f}x CPU"
                  + (f" | full {row['full'].get('seconds', float('nan')):6.1f} s" if args.full else ""))  # fmt: skip
            print(f"{'':18s} headers for {kw.get('extra_cflags')}: {headers['wall_s']:.0f} s "
                  f"({headers['cpu_s']:.0f} CPU s) once; warm-up check {warm['cpu_s']:.1f} CPU s")  # fmt: skip
            if "new_key" in row:
                n, q = row["new_key"], row["new_key_load_inline"]
                print(f"{'':18s} new key (+ -mavx2): load_inline {q.get('seconds', float('nan')):6.1f} s "
                      f"({q['cpu_s']:5.1f} CPU s) | musaenv {n.get('seconds', float('nan')):6.1f} s "
                      f"({n['cpu_s']:5.1f} CPU s, ok={n.get('ok')}) | "
                      f"{q['cpu_s'] / max(n['cpu_s'], 1e-9):4.1f}x CPU")  # fmt: skip
            out.write_text(json.dumps(results, indent=1))  # after each candidate: a long run keeps what it measured
        if args.error and args.candidates:  # a kernel error in the first candidate: what a compile error costs
            kw = load_inline_kwargs(CANDIDATES[args.candidates[0]], f"{tag}e")
            kw["cuda_sources"] = [*kw["cuda_sources"], "__global__ void musaenv_broken(float* x) { x[0] = ; }\n"]
            err = musaenv_check(kw)
            results["kernel_error"] = err
            print(f"kernel error in {args.candidates[0]}: musaenv {err.get('seconds', float('nan')):6.1f} s "
                  f"({err['cpu_s']:5.1f} CPU s, ok={err.get('ok')}, {err.get('tier')})")  # fmt: skip
            out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
