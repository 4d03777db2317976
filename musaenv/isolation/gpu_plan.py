"""The GPU plan: what a worker that creates a CUDA or MUSA context needs from each sandbox layer, and its memory bound.

No GPU has run musaenv's sandbox yet, so the plan is written down and checked layer by layer where it can be, on
any machine (docs/sandbox.md, "GPU workers"):

* ``rlimit_as``: none. CUDA reserves host address space far beyond what it uses (a unified-memory pool reserves
  about twice the device's memory), so an address-space limit fails the first context or allocation, and measures
  the driver, not the candidate. The worker's memory is bounded instead by the device allocator
  (:func:`limit_device_memory`: ``torch.cuda.set_per_process_memory_fraction``, ``SandboxConfig.
  device_memory_fraction``). Its host memory has no limit of its own yet: ``oom_score_adj`` 1000 makes the kernel
  kill it first under pressure, and a parent-side watch of its resident memory is still to be built.
* ``device_nodes``: ``/dev/nvidia*`` (and MUSA's) are opened read-write: Landlock lists them as writable, and with
  them the worker's own ``/proc/<pid>``, which the NVIDIA driver writes below at ``cuInit`` (error 304 without it,
  measured on an H200).
* ``proc_driver``: ``/proc/driver/nvidia`` is read by the driver at init; Landlock restricts writes only and the
  hidden paths are musaenv's key directory alone, so it stays readable.
* ``jit_cache``: the driver's PTX JIT cache (``CUDA_CACHE_PATH``) and Triton's cache live under ``HOME``, which the
  sandbox moves into the private workdir; ``CUDA_CACHE_PATH`` is set there explicitly as well.
* ``threads``: the driver starts helper threads; seccomp denies only ``clone`` without ``CLONE_THREAD`` and uid 0
  is exempt from ``RLIMIT_NPROC`` (a non-root worker gets ``max_processes`` headroom, threads included).
* ``seccomp``: the driver needs ``ioctl`` (only the tty ioctls ``TIOCSIG``/``TIOCSTI`` are denied), ``mmap``,
  ``mprotect``, ``madvise`` and futexes, none of them filtered; no network socket (CUDA MPS would need a UNIX
  socket, which ``block_network`` leaves open).
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GPU_NODE_PATTERNS", "GpuLayer", "gpu_plan", "is_gpu_device", "limit_device_memory"]

#: Device nodes a GPU runtime opens read-write (``/dev/mtgpu*``: Moore Threads', assumed, no MUSA machine at hand).
GPU_NODE_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/card*", "/dev/dri/renderD*", "/dev/mtgpu*")


@dataclass(frozen=True)
class GpuLayer:
    """One sandbox layer, checked against what the GPU driver needs.

    Attributes:
        name: The layer (``rlimit_as``, ``device_nodes``, ``proc_driver``, ``jit_cache``, ``threads``, ``seccomp``).
        ok: Whether the layer, as configured, leaves the driver what it needs.
        detail: What was checked, in words.
    """

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def is_gpu_device(device: str) -> bool:
    """True for devices whose runtime creates a driver context (``cuda``, ``musa``)."""
    return device.split(":")[0] in ("cuda", "musa")


def gpu_nodes() -> list[str]:
    """The GPU character devices present on this host."""
    found = [p for pat in GPU_NODE_PATTERNS for p in sorted(glob.glob(pat))]
    return [p for p in found if stat.S_ISCHR(os.stat(p).st_mode)]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def gpu_plan(
    address_space_mb: int,
    workdir: str | Path,
    writable_paths: Sequence[str],
    landlock: bool,
    block_processes: bool,
    max_processes: int,
    nodes: Sequence[str] | None = None,
) -> list[GpuLayer]:
    """Check each sandbox layer, as configured, against what a CUDA/MUSA context needs (see the module docstring).

    Args:
        address_space_mb: The RLIMIT_AS the worker will get (0: none).
        workdir: The worker's private directory (its ``HOME``).
        writable_paths: What Landlock leaves writable.
        landlock: Whether Landlock's write restriction is applied.
        block_processes: Whether seccomp denies process creation (threads stay allowed by design).
        max_processes: ``SandboxConfig.max_processes`` (RLIMIT_NPROC headroom; 0 = none set).
        nodes: The GPU nodes to check (default: those on this host).
    """
    nodes = gpu_nodes() if nodes is None else list(nodes)
    home = str(Path(workdir).resolve())
    layers = [
        GpuLayer("rlimit_as", address_space_mb == 0, f"RLIMIT_AS {address_space_mb or 'none'} MB "
                 "(CUDA reserves host address space beyond its use; memory is bounded by the device allocator)"),
    ]  # fmt: skip
    closed = [n for n in nodes if landlock and not _under(n, writable_paths)]
    layers.append(GpuLayer("device_nodes", not closed, f"{len(nodes)} GPU node(s); not writable: {closed or 'none'}"))
    proc = Path("/proc/driver/nvidia")
    readable = not proc.exists() or os.access(proc, os.R_OK)
    layers.append(GpuLayer("proc_driver", readable, f"{proc}: {'absent' if not proc.exists() else 'readable'}"))
    cache = os.environ.get("CUDA_CACHE_PATH", str(Path(home) / ".nv" / "ComputeCache"))
    cache_ok = _under(os.path.realpath(cache), [home, *writable_paths]) if landlock else True
    layers.append(GpuLayer("jit_cache", cache_ok, f"CUDA_CACHE_PATH={cache}"))
    nproc_ok = os.getuid() == 0 or max_processes == 0 or max_processes >= 16
    layers.append(GpuLayer("threads", nproc_ok, f"seccomp denies processes: {block_processes} (threads allowed); "
                           f"RLIMIT_NPROC headroom {max_processes or 'unset'} (uid {os.getuid()})"))  # fmt: skip
    layers.append(GpuLayer("seccomp", True, "ioctl (bar TIOCSIG/TIOCSTI), mmap, mprotect, madvise, futex unfiltered"))
    return layers


def limit_device_memory(device: str, fraction: float) -> str:
    """Bound what this process may allocate on ``device`` through torch's caching allocator; returns what was done.

    Creates the device context (call it before the sandbox, as the runtime guard's warm-up does). A candidate that
    allocates through the driver directly bypasses torch's allocator: the device's own capacity is then the bound.
    """
    import torch

    if not is_gpu_device(device) or fraction <= 0:
        return "no device memory limit"
    mod: Any = getattr(torch, device.split(":")[0], None)
    setter = getattr(mod, "set_per_process_memory_fraction", None)
    if mod is None or setter is None:
        return f"torch.{device.split(':')[0]} has no set_per_process_memory_fraction: no device memory limit"
    index = torch.device(device).index or 0
    setter(min(fraction, 1.0), index)
    total = mod.get_device_properties(index).total_memory
    return f"torch allocator limited to {fraction:.2f} of {total >> 20} MB on {device}"
