"""The HIP backend (AMD ROCm), added as one file: CUDA-style kernels in ``load_inline(cuda_sources=...)``.

On a ROCm build of torch with an AMD GPU, torch's own ``load_inline`` hipifies the sources and builds them with
hipcc (the record's ``torch`` toolchain), and the candidate runs on torch's ``cuda`` device (ROCm's torch names it
so). Without a GPU but with hipcc it is compile-only: :func:`compile_check` runs ``hipcc -fsyntax-only`` over the
device sources in the confined builder. Neither was available where this was written: the probe's refusal and the
routing are tested here, the hipcc check only where hipcc is installed (tests/unit/backends/test_hip.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from musaenv.backends.base import Backend, BackendInfo, cuda_device_present
from musaenv.errors import BackendUnavailableError

# What load_inline puts before CUDA sources, in HIP's spelling (hipify turns cuda_runtime.h into this).
_PRELUDE = "#include <torch/types.h>\n#include <hip/hip_runtime.h>\n"


def hipcc() -> str | None:
    """hipcc on PATH or under ``ROCM_PATH`` (default /opt/rocm)."""
    found = shutil.which("hipcc")
    own = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "bin" / "hipcc"
    return found or (str(own) if own.is_file() else None)


def _rocm_torch() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return getattr(torch.version, "hip", None) is not None


def probe() -> BackendInfo:
    if _rocm_torch() and cuda_device_present():
        return BackendInfo("hip", "cuda", "gpu")
    if hipcc() is not None:
        return BackendInfo(
            "hip", "cpu", "gpu", compile_only=True, reason="no AMD GPU here: sources are checked by hipcc, not run"
        )
    raise BackendUnavailableError(
        "backend 'hip' needs a ROCm build of torch that sees an AMD GPU, or at least hipcc for compile-only checks "
        "(set ROCM_PATH to a ROCm install); found neither"
    )


def compile_check(spec: Mapping[str, Any], tmp: Path) -> dict[str, object]:
    """Syntax- and type-check the device sources with hipcc (run confined by the builder, in ``tmp``)."""
    exe = hipcc()
    if exe is None:
        return {"ok": False, "log": "no hipcc on this machine", "tier": "hip_compile_only", "infra": True}
    from torch.utils.cpp_extension import include_paths

    src = tmp / "kernels.hip"
    src.write_text(_PRELUDE + "\n".join(spec.get("cuda_sources") or ()))
    incs = [f"-I{p}" for p in [*include_paths(), *(spec.get("extra_include_paths") or ())]]
    cmd = [exe, "-fsyntax-only", "-x", "hip", "-std=c++17", *incs, *(spec.get("extra_cuda_cflags") or ()), str(src)]
    try:
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=float(spec.get("timeout_s") or 300))
    except subprocess.TimeoutExpired:
        return {"ok": False, "log": f"hipcc ran past {spec.get('timeout_s') or 300} s", "tier": "hip_compile_only"}
    return {"ok": proc.returncode == 0, "log": proc.stdout + proc.stderr, "tier": "hip_compile_only"}


BACKEND = Backend(
    name="hip",
    device="cuda",
    tier="gpu",
    probe=probe,
    prompt_note="Write HIP kernels in CUDA's spelling (__global__ functions, <<<grid, block>>> launches) and build "
    "them with load_inline(..., cpp_sources=..., cuda_sources=..., functions=[...]); ROCm's torch hipifies them and "
    "compiles them with hipcc. Launch them on the current stream.",
    ray_resources={"num_gpus": 1},
    toolchain="torch",
    compile_check="musaenv.backends.hip:compile_check",
    kernel_marker="__global__",
)
