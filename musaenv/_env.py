"""The one place musaenv reads environment variables.

* ``MUSAENV_CACHE_DIR``: build cache and reference-timing cache (default ``~/.cache/musaenv``).
* ``CUDA_HOME`` / ``CUDA_PATH``: CUDA toolkit root (default ``/usr/local/cuda`` if it has ``bin/nvcc``).
  The ``nvcc`` found on PATH is deliberately not used to derive it: it may be a wrapper script elsewhere.
* ``MUSA_HOME``: MUSA toolkit root (default ``/usr/local/musa``).
* ``MUSAENV_KEY_DIR``: where the key that seals shared cache entries lives (default: ``<cache dir>.keys``, beside
  the cache, never inside it; sandboxed processes cannot read it).
* ``MUSAENV_SANDBOX_IMPL``: how the worker sandbox is applied: ``auto`` (default), ``extension`` or ``python``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "cache_dir",
    "cuda_home",
    "ext_cache_root",
    "key_dir",
    "musa_home",
    "pch_cache_root",
    "sandbox_implementation",
]


def cache_dir() -> Path:
    """Root of musaenv's caches (created on first use by the callers that write there)."""
    env = os.environ.get("MUSAENV_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "musaenv"


def ext_cache_root() -> Path:
    """Directory of built extensions (``<MUSAENV_CACHE_DIR>/ext``)."""
    return cache_dir() / "ext"


def pch_cache_root() -> Path:
    """Directory of precompiled headers, torch's flag template and cached binding objects."""
    return cache_dir() / "pch"


def key_dir() -> Path:
    """Directory of the per-installation HMAC key (:mod:`musaenv.isolation.integrity`)."""
    env = os.environ.get("MUSAENV_KEY_DIR")
    if env:
        return Path(env).expanduser()
    root = cache_dir()
    return root.with_name(root.name + ".keys")


def cuda_home() -> Path | None:
    """CUDA toolkit root: ``CUDA_HOME``, then ``CUDA_PATH``, then ``/usr/local/cuda``; ``None`` without nvcc."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        v = os.environ.get(var)
        if v and (Path(v) / "bin" / "nvcc").exists():
            return Path(v)
    default = Path("/usr/local/cuda")
    return default if (default / "bin" / "nvcc").exists() else None


def musa_home() -> Path | None:
    """MUSA toolkit root: ``MUSA_HOME``, then ``/usr/local/musa``; ``None`` when absent."""
    v = os.environ.get("MUSA_HOME")
    if v and Path(v).exists():
        return Path(v)
    default = Path("/usr/local/musa")
    return default if default.exists() else None


def sandbox_implementation() -> str:
    """``MUSAENV_SANDBOX_IMPL``, lower-cased: ``auto`` (default), ``extension`` or ``python``.

    ``auto`` uses the C++ helper when it is built, else ctypes; ``python`` forces the ctypes fallback (tests).
    Validated by :func:`musaenv.isolation.sandbox.enter_sandbox`.
    """
    return os.environ.get("MUSAENV_SANDBOX_IMPL", "").strip().lower() or "auto"


def child_env(threads: int | None = None) -> dict[str, str]:
    """Environment for musaenv's own subprocesses (workers, builders): importable musaenv, pinned thread counts."""
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Pinned, not re-derived: a sandboxed process moves HOME (and so the default cache and key dirs) to its workdir.
    env["MUSAENV_CACHE_DIR"] = str(cache_dir().absolute())
    env["MUSAENV_KEY_DIR"] = str(key_dir().absolute())
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
    return env
