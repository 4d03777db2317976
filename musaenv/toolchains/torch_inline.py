"""Builds through a ``load_inline`` of torch's own (torch's, or torch_musa's for MUSA device sources).

The path every faster toolchain hands a job on to, and the MUSA backend's own: the loader runs with its final import
switched off (:func:`no_import`), so nothing of the candidate is imported or run in the builder. Split from
:mod:`musaenv.toolchains.builder` so a toolchain built on it is one module that does not import the builder.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from musaenv.backends import REGISTRY
from musaenv.toolchains.job import CompileJob

__all__ = ["MUSA_MISSING", "musa_build", "musa_kwargs", "no_import", "torch_build"]


@contextlib.contextmanager
def no_import(module: Any) -> Iterator[None]:
    """Let ``load_inline`` build without importing the result (its static constructors would run here)."""
    original = getattr(module, "_import_module_from_library", None)
    if original is None:
        raise RuntimeError(f"{module.__name__} has no _import_module_from_library; cannot build without importing")
    module._import_module_from_library = lambda *a, **k: None
    try:
        yield
    finally:
        module._import_module_from_library = original


def torch_build(job: CompileJob, tmp: Path, tier: str = "torch") -> dict[str, object]:
    """Build ``job`` with torch's ``load_inline`` into ``tmp``; the report's fields, under ``tier``."""
    import torch.utils.cpp_extension as ce

    accepted = set(inspect.signature(ce.load_inline).parameters)
    kwargs = {
        "cpp_sources": job.cpp_sources,
        "cuda_sources": job.cuda_sources or None,
        "functions": job.functions,
        "extra_cflags": job.extra_cflags or None,
        "extra_cuda_cflags": job.extra_cuda_cflags or None,
        "extra_ldflags": job.extra_ldflags or None,
        "extra_include_paths": job.extra_include_paths or None,
        "with_cuda": job.with_cuda,
    }
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    try:
        with no_import(ce):
            ce.load_inline(name=job.name, build_directory=str(tmp), verbose=False, **kwargs)
    except Exception as e:  # compiler errors arrive as RuntimeError carrying the compiler output
        return {"ok": False, "log": f"{type(e).__name__}: {e}", "tier": tier}
    return {"ok": True, "log": "", "tier": tier}


MUSA_MISSING = (
    "the MUSA backend builds with torch_musa's load_inline (torch_musa.utils.musa_extension), and torch_musa is "
    "not importable in the builder: install Moore Threads' torch_musa wheel matching your torch and the MUSA SDK "
    "(mcc under MUSA_HOME, default /usr/local/musa)"
)


def musa_kwargs(spec: dict[str, Any], accepted: set[str]) -> dict[str, Any] | str:
    """torch_musa's ``load_inline`` keywords for a spec, or why they cannot be formed."""
    kwargs: dict[str, Any] = {
        "cpp_sources": spec["cpp_sources"],
        "functions": spec["functions"],
        "extra_cflags": spec["extra_cflags"] or None,
        "extra_ldflags": spec["extra_ldflags"] or None,
        "extra_include_paths": spec["extra_include_paths"] or None,
    }
    # The device sources and flags: torch_musa spells them musa_*; older releases may take CUDA's spelling.
    aliases = [(a, o) for b in REGISTRY.values() if b.toolchain == "mcc" for a, o in b.loader_aliases.items()]
    for alias, ours in aliases:
        names = (alias, ours)
        if not spec[ours]:
            continue
        target = next((n for n in names if n in accepted), None)
        if target is None:
            return f"this torch_musa's load_inline takes none of {names}; cannot pass the MUSA sources"
        kwargs[target] = spec[ours]
    return {k: v for k, v in kwargs.items() if k in accepted and v is not None}


def musa_build(job: CompileJob, tmp: Path) -> dict[str, object]:
    """Build ``job``'s MUSA device sources with torch_musa's ``load_inline`` (mcc), never nvcc."""
    try:
        from torch_musa.utils import musa_extension as me
    except Exception as e:  # missing, or broken against this torch
        return {"ok": False, "log": f"{MUSA_MISSING} ({type(e).__name__}: {e})", "tier": "musa", "infra": True}
    kwargs = musa_kwargs(job.spec(), set(inspect.signature(me.load_inline).parameters))
    if isinstance(kwargs, str):
        return {"ok": False, "log": kwargs, "tier": "musa", "infra": True}
    try:
        with no_import(me):
            me.load_inline(name=job.name, build_directory=str(tmp), verbose=False, **kwargs)
    except Exception as e:  # mcc/g++ errors arrive as RuntimeError carrying the compiler output
        return {"ok": False, "log": f"{type(e).__name__}: {e}", "tier": "musa"}
    return {"ok": True, "log": "", "tier": "musa"}
