"""What a backend is: one :class:`Backend` record per backend module, and what resolving it on a machine gives.

The rest of the package never compares a backend's name: it reads the record's attributes
(:func:`musaenv.backends.get_backend`). A backend module (``cpu.py``, ``cuda.py``, ...) defines ``BACKEND`` and its
``probe``; ``docs/backends.md`` ("Adding a backend") says which attribute each part of the package reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Backend", "BackendInfo", "cuda_device_present"]


@dataclass(frozen=True)
class BackendInfo:
    """A resolved backend.

    Attributes:
        name: The :class:`Backend`'s name (``cpu``, ``cuda``, ``triton``, ``musa``, ``cupy``, ``hip``).
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


def _frozen(m: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class Backend:
    """One backend: everything the package reads about it instead of comparing its name.

    Attributes:
        name: The name users pass (``backend="cuda"``, ``--backend cuda``).
        device: torch device type its candidates run on when the device is present (``cpu``, ``cuda``, ``musa``).
        tier: Size tier of built-in tasks that suits it (``cpu`` or ``gpu``).
        probe: Resolve it on this machine: a :class:`BackendInfo` (maybe compile-only), or
            :class:`~musaenv.errors.BackendUnavailableError` saying what is missing. Probing never initialises a
            device.
        prompt_note: The paragraph of the first prompt that says how to write and build kernels for it.
        auto: Why ``backend="auto"`` picks it when its probe finds its device; empty: ``auto`` never picks it.
        visible_devices: Environment variable that pins a worker to card N of a ``<device>:N`` slot.
        ray_resources: Ray actor options of one evaluation besides its CPU (``{"num_gpus": 1}``).
        loader_aliases: Its ``load_inline``'s keyword arguments that mean one of torch's (``musa_sources`` ->
            ``cuda_sources``); every loader accepts them.
        loader_module: Its own loader module, whose ``load_inline`` and ``load`` the worker replaces too.
        loader_call: What the prompt names as the call that builds kernels.
        toolchain: The builder's toolchain for its device sources (``mcc``: torch_musa's ``load_inline``;
            ``torch``: torch's own, whatever compiler it drives); empty: the CUDA tiers of
            :mod:`musaenv.toolchains.builder`.
        compile_check: ``module:function`` the confined builder runs for a compile-only build instead of the CUDA
            check (``function(spec, tmp)`` returns the builder's result: ``ok``, ``log``, ``tier``).
        worker_hook: ``module:function`` installed in the candidate's worker before the candidate loads
            (``function(state, request)`` returns a context the candidate is loaded in, or None).
        kernel_marker: Text KernelBench's static check requires in the kernel sources (``__global__``).
        kernel_call: A kernel call of ``forward`` that shows the backend's kind of kernel (the static check warns
            ``backend_mismatch`` when there are calls and none is one); None: any.
        mismatch: The warning's sentence when no call of ``forward`` is ``kernel_call``, or, for a backend without
            ``device_code``, when the candidate brings device code.
        device_code: Runs Triton kernels and CUDA/MUSA sources (False: C++ for the CPU only).
        cupy_api: CuPy's RawModule/RawKernel API is the way its kernels are built (checked by
            :mod:`musaenv.verification.static_cupy`, not refused as a CuPy import).
        cpu_interpreter: Without a GPU its kernels run in an interpreter on the CPU: judged on correctness
            (docs/backends.md), unscored ``needs_gpu`` where the interpreter cannot follow, checked against a GPU
            compile when an architecture is configured.
        jit_processes: On a device its JIT compiler runs child processes (the sandbox must allow them).
    """

    name: str
    device: str
    tier: str
    probe: Callable[[], BackendInfo]
    prompt_note: str
    auto: str = ""
    visible_devices: str = ""
    ray_resources: Mapping[str, Any] = field(default_factory=_frozen)
    loader_aliases: Mapping[str, str] = field(default_factory=_frozen)
    loader_module: str = ""
    loader_call: str = "load_inline"
    toolchain: str = ""
    compile_check: str = ""
    worker_hook: str = ""
    kernel_marker: str = ""
    kernel_call: Callable[[str], bool] | None = None
    mismatch: str = ""
    device_code: bool = True
    cupy_api: bool = False
    cpu_interpreter: bool = False
    jit_processes: bool = False


def cuda_device_present() -> bool:
    """torch imports and sees a CUDA (or ROCm) GPU."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
