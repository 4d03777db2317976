"""Compile-only checking of CuPy kernels (``cupy.RawKernel`` / ``cupy.RawModule`` source) with NVRTC, no GPU.

CuPy compiles a ``RawKernel``'s source with NVRTC when it is first launched (or ``compile()`` is called), for the
device's architecture, with ``-ftz=true`` among its options, and loads the cubin with the driver. Without a driver
its public path cannot run at all: ``RawKernel.compile()`` and ``cupy.cuda.compiler.compile_using_nvrtc`` ask the
runtime for the current device first and fail with ``cudaErrorInsufficientDriver`` before NVRTC sees the source
(measured with cupy-cuda13x 14.2 on this GPU-less machine). NVRTC itself needs no driver, so the check calls it
through CuPy's own binding (``cupy_backends.cuda.libs.nvrtc``) with the options CuPy's compile adds
(``-arch=sm_<arch>``, ``-ftz=true``, CuPy's header directory, the CUDA toolkit's headers when there is a
toolkit, ``-std=c++17`` unless the candidate picks a standard) and the candidate's own options: the same compiler,
the same diagnostics, a cubin for one architecture. Measured: about 0.02-0.1 s per kernel
(``benchmarks/cuda_build_speed.py``).

Needs the ``cupy`` extra (``cupy-cuda13x`` and the ``nvidia-cuda-nvrtc`` wheel that provides ``libnvrtc``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from musaenv import _env
from musaenv.errors import BackendUnavailableError

__all__ = ["NvrtcResult", "cupy_compile_options", "nvrtc_compile"]

log = logging.getLogger(__name__)

# Options of a RawKernel's compile that change what the front end accepts; a candidate may not override them.
_FIXED = ("-arch", "--gpu-architecture", "-I", "--include-path")


@dataclass(frozen=True)
class NvrtcResult:
    """Outcome of :func:`nvrtc_compile`.

    Attributes:
        ok: NVRTC produced a cubin.
        log: NVRTC's program log verbatim (errors and warnings).
        seconds: Wall time of the compile.
        options: The options NVRTC was given.
        cubin_bytes: Size of the cubin (0 on failure).
    """

    ok: bool
    log: str
    seconds: float
    options: tuple[str, ...]
    cubin_bytes: int = 0


def _nvrtc() -> object:
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception as exc:  # not installed, or libnvrtc missing: no check is possible here
        raise BackendUnavailableError(
            f"CuPy kernels are compiled with NVRTC through CuPy: pip install 'musaenv[cupy]' (found: {exc})"
        ) from exc
    return nvrtc


def cupy_compile_options(arch: int, options: Sequence[str] = ()) -> tuple[str, ...]:
    """The options CuPy's compile of a ``RawKernel`` gives NVRTC, then the candidate's (arch and includes fixed)."""
    import cupy

    include = Path(cupy.__file__).parent / "_core" / "include"
    own = [o for o in options if not o.startswith(_FIXED)]
    std = () if any(o.startswith(("-std", "--std")) for o in own) else ("-std=c++17",)  # CuPy 14's default
    # The toolkit's headers (cuda_fp16.h, ...), which CuPy adds from its CUDA path too; NVRTC has none built in.
    home = _env.cuda_home()
    toolkit = (f"-I{home / 'include'}",) if home is not None and (home / "include").is_dir() else ()
    # CuPy 14 bundles CCCL (its complex.cuh uses Thrust's headers) and puts it first on the include path.
    bundled = include / "cupy" / "_cccl"
    cccl = tuple(f"-I{bundled / sub}" for sub in ("libcudacxx", "thrust", "cub") if (bundled / sub).is_dir())
    return (f"-arch=sm_{arch}", "-ftz=true", *cccl, f"-I{include}", *toolkit, *std, *own)


def nvrtc_compile(
    source: str, arch: int = 90, options: Sequence[str] = (), name: str = "kernel.cu",
    name_expressions: Sequence[str] = (),
) -> NvrtcResult:  # fmt: skip
    """Compile ``source`` as a ``RawKernel``/``RawModule`` would, without a device; a bad source is ``ok=False``.

    Args:
        source: The kernel source (``RawKernel(code, ...)``'s ``code``).
        arch: Compute capability to compile for (``90``: Hopper).
        options: The candidate's ``options=`` (architecture and include options are CuPy's, not the candidate's).
        name: The file name NVRTC reports in diagnostics.
        name_expressions: ``RawModule(name_expressions=...)``: template instantiations to compile.

    Raises:
        BackendUnavailableError: CuPy or its NVRTC library is missing.
    """
    nvrtc = _nvrtc()
    opts = cupy_compile_options(arch, options)
    start = time.perf_counter()
    prog = nvrtc.createProgram(source, name, [], [])  # type: ignore[attr-defined]
    try:
        for expr in name_expressions:
            nvrtc.addNameExpression(prog, expr)  # type: ignore[attr-defined]
        try:
            nvrtc.compileProgram(prog, list(opts))  # type: ignore[attr-defined]
        except nvrtc.NVRTCError:  # type: ignore[attr-defined]
            text = nvrtc.getProgramLog(prog)  # type: ignore[attr-defined]
            return NvrtcResult(False, text, round(time.perf_counter() - start, 4), opts)
        text = nvrtc.getProgramLog(prog)  # type: ignore[attr-defined]
        cubin = nvrtc.getCUBIN(prog)  # type: ignore[attr-defined]
    finally:
        nvrtc.destroyProgram(prog)  # type: ignore[attr-defined]
    return NvrtcResult(True, text, round(time.perf_counter() - start, 4), opts, len(cubin))
