"""Sealed shared state: what verifies, what does not, and that a sandboxed process cannot read the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from musaenv.isolation.integrity import read_sealed, seal, unseal, write_sealed


@pytest.fixture(autouse=True)
def _own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSAENV_KEY_DIR", str(tmp_path / "keys"))


def test_sealed_record_round_trips_and_any_change_fails(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    write_sealed(path, "reftime:k", {"median_ms": 1.5})
    assert read_sealed(path, "reftime:k") == {"median_ms": 1.5}
    assert read_sealed(path, "reftime:other") is None  # one kind cannot stand in for another
    record = json.loads(path.read_text())
    record["body"]["median_ms"] = 9.0  # forged value, old HMAC
    path.write_text(json.dumps(record))
    assert read_sealed(path, "reftime:k") is None
    assert unseal("x", {"kind": "x", "body": {}, "hmac": "0" * 64}) is None
    assert unseal("x", seal("x", {"a": 1})) == {"a": 1}
    assert read_sealed(tmp_path / "absent.json", "x") is None


def test_key_is_private_and_stable(tmp_path: Path) -> None:
    first = seal("x", {"a": 1})
    key = tmp_path / "keys" / "hmac.key"
    assert key.stat().st_mode & 0o777 == 0o600 and (tmp_path / "keys").stat().st_mode & 0o777 == 0o700
    assert seal("x", {"a": 1}) == first


_PROBE = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    from musaenv import _env
    from musaenv.config import SandboxConfig
    from musaenv.isolation.integrity import seal
    from musaenv.isolation.sandbox import enter_sandbox

    seal("x", {})  # make the key
    other = Path(tempfile.mkdtemp())  # a second writable tree, as Triton's cache is beside the workdir
    work = Path(tempfile.mkdtemp())
    report = enter_sandbox(SandboxConfig(), work, extra_writable=[other])
    (work / "k.bin").write_text("x")
    try:
        (work / "k.bin").replace(other / "k.bin")  # a rename across directories (Landlock's REFER right)
        moved = "ok"
    except OSError as e:
        moved = type(e).__name__
    try:
        (_env.key_dir() / "hmac.key").read_bytes()
        key = "read"
    except OSError as e:
        key = type(e).__name__
    print(json.dumps({"key": key, "moved": moved, "stdlib": len(Path(json.__file__).read_text()) > 0,
                      "applied": report.applied, "not_applied": dict(report.not_applied)}))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="Landlock")
def test_sandboxed_process_cannot_read_the_key(tmp_path: Path) -> None:
    env = {**os.environ, "MUSAENV_KEY_DIR": str(tmp_path / "keys"), "MUSAENV_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if "landlock_hide_key" not in got["applied"]:
        pytest.skip(f"Landlock unavailable here: {got['not_applied'].get('landlock_hide_key')}")
    assert got["key"] == "PermissionError" and got["stdlib"]
    assert got["moved"] == "ok"  # the read layer must not forbid renames between writable trees
