"""Tamper evidence for shared state: HMAC-sealed records with a per-installation key (parent side).

What musaenv shares between evaluations, processes and runs (built extensions, cached compile failures,
compile-only verdicts, reference timings) is written only by the parent, sealed here, and verified on every read;
an entry that fails is ignored (rebuilt or re-measured) with a warning, never trusted.

The key is 32 bytes from ``os.urandom``, created once in :func:`musaenv._env.key_dir` (``0700``, the key ``0600``,
outside the cache directory). Sandboxed processes (candidate workers, reference workers, builds) run as the same
user, so file permissions alone do not hide it: the sandbox adds a Landlock layer that denies reading that
directory (docs/sandbox.md). An attacker who can write the cache but not read the key can only make entries
fail verification, which costs a rebuild.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
from pathlib import Path
from typing import Any

from musaenv import _env

__all__ = ["file_sha256", "read_sealed", "seal", "unseal", "write_sealed"]

log = logging.getLogger(__name__)

_KEY_BYTES = 32


@functools.lru_cache(maxsize=4)
def _key(directory: str) -> bytes:
    d = Path(directory)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = d / "hmac.key"
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(_KEY_BYTES))
        finally:
            os.close(fd)
    key = path.read_bytes()
    if len(key) != _KEY_BYTES:  # a half-written key of a process that died: nothing sealed with it can verify
        raise OSError(f"{path} holds {len(key)} bytes, expected {_KEY_BYTES}; delete it to make a new key")
    return key


def _mac(kind: str, body: dict[str, Any]) -> str:
    payload = json.dumps([kind, body], sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(_key(str(_env.key_dir())), payload, hashlib.sha256).hexdigest()


def seal(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with an HMAC over (``kind``, body); ``kind`` keeps one record type from standing in for another."""
    return {"body": body, "kind": kind, "hmac": _mac(kind, body)}


def unseal(kind: str, record: Any) -> dict[str, Any] | None:
    """The body of a sealed record, or ``None`` when it is not one of ``kind`` or its HMAC does not verify."""
    if not isinstance(record, dict) or record.get("kind") != kind or not isinstance(record.get("body"), dict):
        return None
    if not hmac.compare_digest(str(record.get("hmac", "")), _mac(kind, record["body"])):
        return None
    return dict(record["body"])


def write_sealed(path: Path, kind: str, body: dict[str, Any]) -> None:
    """Write a sealed record atomically (a reader never sees half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    part.write_text(json.dumps(seal(kind, body)))
    os.replace(part, path)


def read_sealed(path: Path, kind: str) -> dict[str, Any] | None:
    """The verified body at ``path``; ``None`` when absent, and ``None`` with a warning when it fails to verify."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        record = None
    body = unseal(kind, record)
    if body is None:
        log.warning("%s failed verification (not written by this installation's parent); ignoring it", path)
    return body


def file_sha256(path: Path) -> str:
    """sha256 of a file's content."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
