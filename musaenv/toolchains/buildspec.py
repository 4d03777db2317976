"""What one ``load_inline`` call asks to build (:class:`BuildSpec`) and the toolchain part of its cache key."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

from musaenv.toolchains.loadargs import FLAG_KWARGS, LIST_KWARGS, normalise_functions, normalise_list

__all__ = ["FLAG_KWARGS", "LIST_KWARGS", "BuildSpec", "toolchain_fingerprint"]


def toolchain_fingerprint() -> str:
    """torch version, Python version, machine and compiler version (part of every cache key)."""
    return _toolchain_fingerprint()


@functools.lru_cache(maxsize=1)
def _toolchain_fingerprint() -> str:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=10).stdout
        cxx_version = out.splitlines()[0] if out else cxx
    except (OSError, subprocess.SubprocessError):
        cxx_version = cxx
    return "|".join([torch_version, f"py{sys.version_info[0]}.{sys.version_info[1]}", platform.machine(), cxx_version])


@dataclass(frozen=True)
class BuildSpec:
    """What one ``load_inline`` call asked for, normalised and JSON-safe.

    Attributes:
        cpp_sources: C++ sources (torch prepends ``#include <torch/extension.h>`` to the first).
        cuda_sources: CUDA sources.
        functions: Names to bind (list) or name -> docstring (dict), or ``None``.
        extra_cflags: Extra host compiler flags.
        extra_cuda_cflags: Extra nvcc flags.
        extra_ldflags: Extra linker flags.
        extra_include_paths: Extra include directories.
        with_cuda: Force CUDA on/off (``None``: when there are CUDA sources).
        backend: Backend that requested the build (part of the cache key).
        compile_only: Compile without producing a loadable module (no device present).
    """

    cpp_sources: tuple[str, ...] = ()
    cuda_sources: tuple[str, ...] = ()
    functions: tuple[str, ...] | dict[str, str] | None = None
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    extra_include_paths: tuple[str, ...] = ()
    with_cuda: bool | None = None
    backend: str = "cpu"
    compile_only: bool = False

    @classmethod
    def from_load_inline(cls, kwargs: dict[str, Any], backend: str, compile_only: bool = False) -> BuildSpec:
        """Normalise the keyword arguments of a candidate's ``load_inline`` call (torch's spellings: a backend's own,
        ``musa_sources``, is renamed first by :func:`musaenv.toolchains.loadargs.canonical`).

        Each argument is read as :mod:`musaenv.toolchains.loadargs` reads it: flag lists as torch does (stripped,
        empty ones dropped, split like a shell splits them).

        Raises:
            TypeError: an argument has a type ``load_inline`` would not accept either.
            ValueError: a flag list with unbalanced quotes (torch's shell would fail the build command).
        """
        norm = {key: normalise_list(key, kwargs.get(key)) for key in LIST_KWARGS}
        fns = normalise_functions(kwargs.get("functions"))
        with_cuda = kwargs.get("with_cuda")
        return cls(
            functions=fns,
            with_cuda=None if with_cuda is None else bool(with_cuda),
            backend=backend,
            compile_only=compile_only,
            **norm,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BuildSpec:
        """Inverse of :meth:`to_dict`."""
        kw = dict(d)
        for k in LIST_KWARGS:
            kw[k] = tuple(kw.get(k) or ())
        if isinstance(kw.get("functions"), list):
            kw["functions"] = tuple(kw["functions"])
        return cls(**kw)

    @property
    def name(self) -> str:
        """Content-hash module name: sources, flags and toolchain fingerprint."""
        h = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode())
        h.update(_toolchain_fingerprint().encode())
        return f"musaenv_{h.hexdigest()[:24]}"
