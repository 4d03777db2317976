"""The MUSA backend (Moore Threads): torch_musa's ``load_inline`` with ``musa_sources``, built by mcc."""

from __future__ import annotations

import importlib.util

from musaenv.backends.base import Backend, BackendInfo
from musaenv.errors import BackendUnavailableError


def _musa_present() -> bool:
    if importlib.util.find_spec("torch_musa") is None:
        return False
    try:
        import torch
        import torch_musa  # noqa: F401

        return bool(torch.musa.is_available())  # type: ignore[attr-defined]
    except Exception:  # a broken torch_musa install means no MUSA device for us
        return False


def probe() -> BackendInfo:
    if _musa_present():
        return BackendInfo("musa", "musa", "gpu")
    raise BackendUnavailableError(
        "backend 'musa' needs torch_musa and a Moore Threads GPU; torch_musa is not importable here "
        "(install Moore Threads' torch_musa wheel matching your torch, or use backend='cpu')"
    )


BACKEND = Backend(
    name="musa",
    device="musa",
    tier="gpu",
    probe=probe,
    prompt_note="Write MUSA kernels (CUDA-like kernel language) and build them with torch_musa's load_inline "
    "(musa_sources=...). Launch them on the current MUSA stream.",
    auto="torch_musa imports and sees a MUSA GPU",
    visible_devices="MUSA_VISIBLE_DEVICES",
    ray_resources={"resources": {"MUSA": 1}},
    # torch_musa's spelling; the builder hands them back to torch_musa's loader, which older releases spell as CUDA's
    loader_aliases={"musa_sources": "cuda_sources", "extra_musa_cflags": "extra_cuda_cflags"},
    loader_module="torch_musa.utils.musa_extension",
    toolchain="mcc",
)
