"""Backends: where candidates run and how their kernels are built.

Each backend is one module here defining a :class:`Backend` record (``BACKEND``) and its ``probe`` of the machine;
:data:`REGISTRY` holds them in the order ``auto`` tries them. The rest of the package reads a record's attributes
(:func:`get_backend`) instead of comparing a backend's name. :func:`resolve_backend` turns a user's choice
(``auto`` or a registered name) into a :class:`BackendInfo`, probing the machine without initialising a device.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from musaenv.backends import cpu, cuda, cupy, hip, musa, triton
from musaenv.backends.base import Backend, BackendInfo
from musaenv.errors import BackendUnavailableError

__all__ = ["BACKENDS", "REGISTRY", "Backend", "BackendInfo", "get_backend", "loader_aliases", "resolve_backend"]

log = logging.getLogger(__name__)

# In the order `auto` tries those with an `auto` reason: a new backend is its module plus its entry here.
REGISTRY: Mapping[str, Backend] = {
    b.name: b for b in (cpu.BACKEND, cuda.BACKEND, triton.BACKEND, musa.BACKEND, cupy.BACKEND, hip.BACKEND)
}
BACKENDS = ("auto", *REGISTRY)


def get_backend(name: str, strict: bool = True) -> Backend:
    """The record of a registered backend; ``strict=False``: the cpu backend's for any other name (``auto`` or a
    custom evaluator's name, as a prompt is written then).

    Raises:
        BackendUnavailableError: no backend has that name (``strict`` only).
    """
    try:
        return REGISTRY[name]
    except KeyError:
        if not strict:
            return cpu.BACKEND
        raise BackendUnavailableError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}") from None


def loader_aliases() -> dict[str, str]:
    """Every backend's ``load_inline`` keywords that mean one of torch's (``musa_sources`` -> ``cuda_sources``)."""
    return {alias: ours for b in REGISTRY.values() for alias, ours in b.loader_aliases.items()}


def resolve_backend(name: str = "auto") -> BackendInfo:
    """Resolve a backend name for this machine.

    Raises:
        BackendUnavailableError: the backend can neither run nor compile here.
    """
    if name != "auto":
        return get_backend(name).probe()
    for b in REGISTRY.values():
        if not b.auto:
            continue
        try:
            info = b.probe()
        except BackendUnavailableError:
            continue
        if not info.compile_only and info.device != "cpu":
            return BackendInfo(info.name, info.device, info.tier, reason=b.auto)
    return BackendInfo("cpu", "cpu", "cpu", reason="no GPU visible")
