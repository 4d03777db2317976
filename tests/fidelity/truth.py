"""Ground truth: what torch itself does with a program, in a fresh subprocess (torch's own ``load_inline``).

* :func:`torch_runs`: the program executed under real torch (its ``load_inline`` builds and imports the
  extension), ``ModelNew`` built and run as KernelBench runs it, its output compared with the reference's.
* :func:`torch_builds_cuda`: torch's own build of CUDA sources on this GPU-less machine. A CPU wheel of torch
  cannot finish that build alone, so three things of the environment are supplied, none of the program: the
  toolkit (``CUDA_HOME``, one architecture), the define the CPU wheel's c10/cuda headers need, and empty stand-ins
  for the wheel's missing ``libc10_cuda``/``libtorch_cuda`` so torch's link runs. The built module's undefined
  symbols are then looked up with the dynamic loader (``dlsym``) in the libraries torch links; only symbols of the
  two missing CUDA libraries are left out. What remains is what ``import`` would fail on with a CUDA build of torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from musaenv import _env

_RUN = textwrap.dedent(
    """
    import json, sys, types, torch
    ref_src, cand_src = sys.argv[1], sys.argv[2]
    out = {}
    def load(src, name):
        m = types.ModuleType(name)
        exec(compile(src, name, "exec"), m.__dict__)
        return m
    ref = load(ref_src, "reference")
    try:
        cand = load(cand_src, "candidate")
        torch.manual_seed(0); init = ref.get_init_inputs()
        torch.manual_seed(1); model = cand.ModelNew(*init)
        torch.manual_seed(1); want_model = ref.Model(*init)
        torch.manual_seed(2); inputs = ref.get_inputs()
        with torch.no_grad():
            got, want = model(*inputs), want_model(*inputs)
        out = {"outcome": "ok" if torch.allclose(got, want, atol=1e-4, rtol=1e-4) else "mismatch"}
    except BaseException as e:
        out = {"outcome": type(e).__name__, "error": str(e)}
    print("TRUTH " + json.dumps(out))
    """
)

_BUILD = textwrap.dedent(
    """
    import ctypes, glob, json, os, subprocess, sys, sysconfig
    import torch
    import torch.utils.cpp_extension as ce
    ce.CUDA_HOME = os.environ["CUDA_HOME"]  # a CPU wheel leaves it unset
    spec = json.loads(sys.argv[1])
    build = sys.argv[2]
    out = {"built": False, "unresolved": []}
    try:
        ce.load_inline(name=spec["name"], cpp_sources=spec["cpp"], cuda_sources=spec["cuda"],
                       functions=spec["functions"], build_directory=build)
        out["imported"] = True
    except BaseException as e:
        out["error"] = f"{type(e).__name__}: {e}"[-3000:]
    so = os.path.join(build, spec["name"] + ".so")
    out["built"] = os.path.exists(so)
    if out["built"]:
        lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        paths = [os.path.join(lib, f"lib{n}.so") for n in ("c10", "torch_cpu", "torch", "torch_python")]
        paths += [os.path.join(ce.CUDA_HOME, "lib64", "libcudart.so")]
        paths += [os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY"))]
        paths += ["libstdc++.so.6", "libgcc_s.so.1", "libm.so.6", "libc.so.6"]
        handles = [ctypes.CDLL(p) for p in paths if "/" not in p or os.path.exists(p)]
        nm = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True, text=True).stdout
        names = [l.split()[-1].split("@")[0] for l in nm.splitlines() if l.split()[:1] == ["U"]]
        missing = [n for n in names if not any(hasattr(h, n) for h in handles)]
        shown = subprocess.run(["c++filt"], input="\\n".join(missing), capture_output=True, text=True).stdout
        shown = shown.split("\\n")
        absent_here = ("c10::cuda::", "at::cuda::")  # libc10_cuda / libtorch_cuda: not in a CPU wheel
        out["unresolved"] = [d for d in shown if d and not any(a in d for a in absent_here)]
    print("TRUTH " + json.dumps(out))
    """
)


def _truth(argv: list[str], env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", *argv], capture_output=True, text=True, env=env, timeout=timeout_s, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("TRUTH ")]
    assert lines, f"the torch subprocess gave no answer (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len("TRUTH ") :])
    return result


def torch_runs(reference: str, candidate: str, extensions_dir: Path, timeout_s: float = 900) -> dict[str, Any]:
    """``{"outcome": "ok" | "mismatch" | <exception type>, "error": ...}`` of the program under real torch."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions_dir)}
    return _truth([_RUN, reference, candidate], env, timeout_s)


def torch_builds_cuda(
    name: str, cpp: str, cuda: str, functions: list[str], work: Path, timeout_s: float = 900
) -> dict[str, Any]:
    """``{"built": bool, "unresolved": [demangled symbols], "error": ...}`` of torch's own build of the sources."""
    cuda_home = _env.cuda_home()
    assert cuda_home is not None
    stubs = work / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    empty = stubs / "empty.c"
    empty.write_text("")
    for lib in ("c10_cuda", "torch_cuda"):
        if not (stubs / f"lib{lib}.so").exists():
            subprocess.run(["cc", "-shared", "-o", str(stubs / f"lib{lib}.so"), str(empty)], check=True)
    env = {
        **os.environ,
        "CUDA_HOME": str(cuda_home),
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "NVCC_APPEND_FLAGS": "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE",  # what musaenv adds for the CPU wheel too
        "LIBRARY_PATH": os.pathsep.join(p for p in (str(stubs), os.environ.get("LIBRARY_PATH", "")) if p),
    }
    build = work / name
    build.mkdir(parents=True, exist_ok=True)
    spec = json.dumps({"name": name, "cpp": cpp, "cuda": cuda, "functions": functions})
    return _truth([_BUILD, spec, str(build)], env, timeout_s)
