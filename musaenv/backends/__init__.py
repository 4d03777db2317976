"""Backends: where candidates run and how their kernels are built.

Each backend is described by a :class:`BackendInfo`; :func:`resolve_backend` turns a user's choice
(``auto``, ``cpu``, ``cuda``, ``triton``, ``musa``, ``cupy``) into one, probing the machine without initialising a
device.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

from musaenv import _env
from musaenv.errors import BackendUnavailableError

__all__ = ["BACKENDS", "BackendInfo", "resolve_backend"]

log = logging.getLogger(__name__)

BACKENDS = ("auto", "cpu", "cuda", "triton", "musa", "cupy")


@dataclass(frozen=True)
class BackendInfo:
    """A resolved backend.

    Attributes:
        name: ``cpu``, ``cuda``, ``triton``, ``musa`` or ``cupy`` (CUDA kernels built by CuPy's NVRTC).
        device: torch device string candidates run on (``cpu``, ``cuda``, ``musa``).
        tier: Size tier that suits it (``cpu``, ``gpu``, or ``interp``: Triton's CPU interpreter, the cpu tier's
            sizes shrunk further where a file's can be; docs/backends.md).
        compile_only: True when the device is absent: sources are compiled for real but not run.
        reason: Why it was chosen or why it is compile-only.
    """

    name: str
    device: str
    tier: str
    compile_only: bool = False
    reason: str = ""


def _cuda_device_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _musa_present() -> bool:
    if importlib.util.find_spec("torch_musa") is None:
        return False
    try:
        import torch
        import torch_musa  # noqa: F401

        return bool(torch.musa.is_available())  # type: ignore[attr-defined]
    except Exception:  # a broken torch_musa install means no MUSA device for us
        return False


def resolve_backend(name: str = "auto") -> BackendInfo:
    """Resolve a backend name for this machine.

    Raises:
        BackendUnavailableError: the backend can neither run nor compile here.
    """
    if name not in BACKENDS:
        raise BackendUnavailableError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    if name == "auto":
        if _cuda_device_present():
            return BackendInfo("cuda", "cuda", "gpu", reason="a CUDA GPU is visible")
        if _musa_present():
            return BackendInfo("musa", "musa", "gpu", reason="torch_musa imports and sees a MUSA GPU")
        return BackendInfo("cpu", "cpu", "cpu", reason="no GPU visible")
    if name == "cpu":
        return BackendInfo("cpu", "cpu", "cpu")
    if name == "cuda":
        if _cuda_device_present():
            return BackendInfo("cuda", "cuda", "gpu")
        if _env.cuda_home() is not None:
            return BackendInfo(
                "cuda",
                "cpu",
                "gpu",
                compile_only=True,
                reason="no CUDA GPU here: sources are compiled with nvcc but not run",
            )
        raise BackendUnavailableError(
            "backend 'cuda' needs a CUDA GPU, or at least nvcc for compile-only checks; found neither "
            "(set CUDA_HOME to a CUDA toolkit, or use backend='cpu')"
        )
    if name == "triton":
        if importlib.util.find_spec("triton") is None:
            raise BackendUnavailableError("backend 'triton' needs the triton package: pip install 'musaenv[triton]'")
        if _cuda_device_present():
            return BackendInfo("triton", "cuda", "gpu")
        _require_interpreter_triton()
        return BackendInfo("triton", "cpu", "interp", reason="no GPU: Triton kernels run in TRITON_INTERPRET=1 mode")
    if name == "cupy":
        return _resolve_cupy()
    if _musa_present():
        return BackendInfo("musa", "musa", "gpu")
    raise BackendUnavailableError(
        "backend 'musa' needs torch_musa and a Moore Threads GPU; torch_musa is not importable here "
        "(install Moore Threads' torch_musa wheel matching your torch, or use backend='cpu')"
    )


def _resolve_cupy() -> BackendInfo:
    """CuPy candidates: kernels compiled by NVRTC through CuPy; without a GPU they are compiled, not run."""
    if importlib.util.find_spec("cupy") is None:
        raise BackendUnavailableError(
            "backend 'cupy' needs CuPy and NVRTC: pip install 'musaenv[cupy]' (cupy-cuda13x, nvidia-cuda-nvrtc)"
        )
    if _cuda_device_present():
        return BackendInfo("cupy", "cuda", "gpu")
    try:  # compile-only needs NVRTC itself, which CuPy loads lazily: a missing libnvrtc shows here, not per candidate
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:
        raise BackendUnavailableError(
            f"backend 'cupy' without a GPU compiles kernels with NVRTC, which cannot be loaded here ({exc}); "
            "pip install 'musaenv[cupy]' (nvidia-cuda-nvrtc)"
        ) from exc
    return BackendInfo(
        "cupy", "cpu", "gpu", compile_only=True,
        reason="no CUDA GPU here: CuPy kernels are compiled with NVRTC but not run",
    )  # fmt: skip


# Triton's interpreter before 3.2 loses the tl.constexpr of kernel arguments when the kernel's module is not in
# sys.modules (tl.arange(0, BLOCK) fails with "arange's arguments must be of type tl.constexpr"), and candidates
# are loaded that way. Seen with 3.0 and 3.1; 3.2, 3.6 and 3.9 run the shipped solutions.
_MIN_INTERPRETER_TRITON = (3, 2)


def _require_interpreter_triton() -> None:
    from importlib import metadata

    try:
        version = metadata.version("triton")
        found = tuple(int(p) for p in version.split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return  # a source build or an unusual version string: let the interpreter speak for itself
    if found < _MIN_INTERPRETER_TRITON:
        want = ".".join(map(str, _MIN_INTERPRETER_TRITON))
        raise BackendUnavailableError(
            f"backend 'triton' without a GPU runs kernels in Triton's interpreter, which needs triton >= {want} "
            f"here (found {version}: its interpreter loses tl.constexpr arguments of kernels loaded the way "
            f"musaenv loads candidates). Install triton>={want} (a GPU machine uses Triton's compiler instead)."
        )
