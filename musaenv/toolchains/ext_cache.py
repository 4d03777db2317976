"""The sealed extension cache: ``<cache>/ext/<name>/<name>.so`` and the manifest that vouches for it.

Only the parent writes here (:func:`install`, :func:`import_artifact`); the confined builder writes only its
private directory. A module is used only while the sealed manifest (:mod:`musaenv.isolation.integrity`) names its
sha256; a compile error is sealed as ``failed.json`` (the same sources fail the same way). Readers and installers
of one entry take its lock file, so a manifest and the module it vouches for never come from different builds.
Split from :mod:`musaenv.toolchains.loader` (which builds) because this part only stores and ships finished builds.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from musaenv._env import ext_cache_root
from musaenv.isolation.integrity import file_sha256, read_sealed, write_sealed
from musaenv.toolchains.faults import FAULT_RULES

__all__ = [
    "built_with",
    "entry_lock",
    "export_artifact",
    "import_artifact",
    "install",
    "sealed_failure",
    "verified_module",
]

log = logging.getLogger("musaenv.toolchains.loader")  # the loader's messages, as before the split


def verified_module(root: Path, name: str) -> Path | None:
    """The cached module when the parent's sealed manifest vouches for its content; else the entry is dropped."""
    so_path = root / name / f"{name}.so"
    if not so_path.exists():
        return None
    with entry_lock(root / name, fcntl.LOCK_SH):  # not half-way through another process's install
        manifest = read_sealed(root / name / "manifest.json", "ext")
        try:
            ok = manifest is not None and manifest.get("name") == name and manifest["sha256"] == file_sha256(so_path)
        except (OSError, KeyError):  # unreadable, or a record of an older release
            ok = False
        if not ok:
            log.warning("cached extension %s does not match the manifest the parent wrote; rebuilding it", name)
            with contextlib.suppress(OSError):
                so_path.unlink()
    return so_path if ok else None


def built_with(root: Path, name: str, failed: bool = False) -> dict[str, Any]:
    """How a cached entry was built, from the record the parent sealed with it: ``{"tier", "declined"}`` (``tier``
    ``None`` for an entry sealed before tiers were recorded). ``failed``: of its sealed compile error."""
    if failed:
        record = read_sealed(root / name / "failed.json", "ext_failed") or {}
        record = record.get("produced_by") or {}
    else:
        record = read_sealed(root / name / "manifest.json", "ext") or {}
    declined = record.get("declined")
    return {"tier": record.get("tier") or None, "declined": declined if isinstance(declined, list) else []}


@contextlib.contextmanager
def entry_lock(entry: Path, how: int) -> Iterator[None]:
    """Hold ``flock(how)`` on a cache entry's lock file; without one (a read-only cache) no lock is held."""
    try:
        lock = open(entry / ".install.lock", "a")  # noqa: SIM115 - closed below
    except OSError:
        yield
        return
    with lock:
        fcntl.flock(lock, how)
        yield


#: Raised when a release learns that failures it used to seal were the harness's: a sealed compile error of an
#: older epoch is built again rather than served. 2: before it, every build under the default cache dir failed in
#: the sandbox (GCC could not open its temporary files) and was sealed as the candidate's compile error.
FAILURE_EPOCH = 2


def seal_failure(final_dir: Path, name: str, log: str, produced_by: dict[str, Any] | None = None) -> None:
    """Seal ``log`` as the compile error of ``name`` (the same sources fail the same way).

    The record carries the fault rule it was judged under (:data:`musaenv.toolchains.faults.FAULT_RULES`) and what
    produced it (toolchain, build path, commands and exit codes): one of another rule is built again.
    """
    record = {"name": name, "log": log, "epoch": FAILURE_EPOCH, "rules": FAULT_RULES, "produced_by": produced_by or {}}
    write_sealed(final_dir / "failed.json", "ext_failed", record)


def sealed_failure(root: Path, name: str) -> str | None:
    """The compiler output of a sealed compile error of ``name``; ``None`` when there is none (or of another
    :data:`FAILURE_EPOCH` or fault rule)."""
    failed = read_sealed(root / name / "failed.json", "ext_failed")
    if not failed or (failed.get("epoch"), failed.get("rules")) != (FAILURE_EPOCH, FAULT_RULES):
        return None
    return str(failed.get("log", "")) if failed.get("name") == name else None


def export_artifact(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """A cached build in a shippable form (another node's cache, :mod:`musaenv.evaluator.ray_artifacts`):
    ``{"name", "so": bytes}`` for a verified module, ``{"name", "failed": log}`` for a sealed compile error, or
    ``None`` when there is nothing trustworthy to ship."""
    root = root or ext_cache_root()
    so_path = verified_module(root, name)
    if so_path is not None:
        return {"name": name, "so": so_path.read_bytes(), "built_with": built_with(root, name)}
    failed = sealed_failure(root, name)
    return None if failed is None else {"name": name, "failed": failed, "rules": FAULT_RULES}


def import_artifact(artifact: dict[str, Any], root: Path | None = None) -> bool:
    """Install a shipped build (from :func:`export_artifact` on another node) into this cache, sealed by this
    node's key like a local build; returns False when it was not new or not a valid artifact."""
    root = root or ext_cache_root()
    name = str(artifact.get("name", ""))
    if (
        not name.startswith("musaenv_")
        or "/" in name
        or verified_module(root, name) is not None
        or sealed_failure(root, name) is not None
    ):
        return False
    final_dir = root / name
    if isinstance(artifact.get("so"), bytes) and artifact["so"]:
        final_dir.mkdir(parents=True, exist_ok=True)
        staged = final_dir / f".{name}.{uuid.uuid4().hex[:8]}.so"
        staged.write_bytes(artifact["so"])
        built = artifact.get("built_with") if isinstance(artifact.get("built_with"), dict) else {}
        record = {"name": name, "sha256": file_sha256(staged), **_how(built)}
        write_sealed(final_dir / "manifest.json", "ext", record)
        os.replace(staged, final_dir / f"{name}.so")
        return True
    if isinstance(artifact.get("failed"), str) and artifact.get("rules") == FAULT_RULES:  # judged under this rule
        seal_failure(final_dir, name, artifact["failed"], {"shipped": True})
        return True
    return False


def _how(built: dict[str, Any] | None) -> dict[str, Any]:
    """The build path a manifest records beside the digest: the tier and the faster paths that did not apply."""
    built = built or {}
    tier, declined = built.get("tier"), built.get("declined")
    return {"tier": tier if isinstance(tier, str) else None, "declined": declined if isinstance(declined, list) else []}


def install(tmp: Path, name: str, final_dir: Path, built: dict[str, Any] | None = None) -> Path:
    """Copy a built module into the shared cache and seal its digest in the manifest (the parent alone does this),
    with how it was built (``built``: ``{"tier", "declined"}``, reported again on every cache hit)."""
    final_dir.mkdir(parents=True, exist_ok=True)
    staged = final_dir / f".{name}.{uuid.uuid4().hex[:8]}.so"
    shutil.copy2(tmp / f"{name}.so", staged)
    # Another process may install the same name at the same moment (one cache dir, two evaluators): the manifest
    # and the module it vouches for are replaced together under a lock, so they never come from different builds.
    with entry_lock(final_dir, fcntl.LOCK_EX):
        record = {"name": name, "sha256": file_sha256(staged), **_how(built)}
        write_sealed(final_dir / "manifest.json", "ext", record)
        os.replace(staged, final_dir / f"{name}.so")
    return final_dir / f"{name}.so"
