"""The sealed extension cache (musaenv.toolchains.ext_cache): a module is used only while its sealed manifest vouches
for it; shipped builds are sealed again by the receiving cache."""

from __future__ import annotations

from pathlib import Path

from musaenv.isolation.integrity import write_sealed
from musaenv.toolchains import ext_cache

_NAME = "musaenv_deadbeef"


def _built(tmp_path: Path, payload: bytes = b"\x7fELF not really") -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / f"{_NAME}.so").write_bytes(payload)
    return work


def test_installed_module_is_verified_and_a_changed_one_is_dropped(tmp_path: Path) -> None:
    root = tmp_path / "ext"
    so = ext_cache.install(_built(tmp_path), _NAME, root / _NAME)
    assert ext_cache.verified_module(root, _NAME) == so
    so.write_bytes(b"someone else's module")  # the cache is writable to others; the manifest is sealed
    assert ext_cache.verified_module(root, _NAME) is None and not so.exists()
    assert ext_cache.verified_module(root, "musaenv_missing") is None


def test_sealed_failure_reads_only_its_own_name(tmp_path: Path) -> None:
    root = tmp_path / "ext"
    ext_cache.seal_failure(root / _NAME, _NAME, "error: x")
    assert ext_cache.sealed_failure(root, _NAME) == "error: x"
    ext_cache.seal_failure(root / "musaenv_other", _NAME, "moved here")
    assert ext_cache.sealed_failure(root, "musaenv_other") is None
    (root / "musaenv_forged").mkdir()
    (root / "musaenv_forged" / "failed.json").write_text('{"name": "musaenv_forged", "log": "unsealed"}')
    assert ext_cache.sealed_failure(root, "musaenv_forged") is None


def test_a_failure_of_an_older_epoch_is_built_again(tmp_path: Path) -> None:
    # Sealed by an older release (no epoch): possibly the harness's fault, as under the default cache dir once.
    root = tmp_path / "ext"
    write_sealed(root / _NAME / "failed.json", "ext_failed", {"name": _NAME, "log": "Cannot create temporary file"})
    assert ext_cache.sealed_failure(root, _NAME) is None


def test_export_then_import_into_another_cache(tmp_path: Path) -> None:
    here, there = tmp_path / "a", tmp_path / "b"
    ext_cache.install(_built(tmp_path, b"module bytes"), _NAME, here / _NAME)
    ext_cache.seal_failure(here / "musaenv_bad", "musaenv_bad", "error: y")
    shipped = [ext_cache.export_artifact(n, here) for n in (_NAME, "musaenv_bad", "musaenv_none")]
    assert shipped[2] is None
    assert all(ext_cache.import_artifact(a, there) for a in shipped if a is not None)
    assert ext_cache.verified_module(there, _NAME) is not None
    assert (there / _NAME / f"{_NAME}.so").read_bytes() == b"module bytes"
    assert ext_cache.sealed_failure(there, "musaenv_bad") == "error: y"
    assert not ext_cache.import_artifact(shipped[0] or {}, there)  # not new
    assert not ext_cache.import_artifact({"name": "../escape", "so": b"x"}, there)
    assert not ext_cache.import_artifact({"name": "musaenv_empty", "so": b""}, there)
