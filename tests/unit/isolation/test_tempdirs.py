"""Temporary directories of workers and fork servers: the sweep removes those of dead owners, never a live one's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from musaenv.isolation import tempdirs
from musaenv.isolation.proctree import start_time


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(tempdirs, "_swept", True)  # the tests call sweep() themselves
    yield tmp_path


def _dead_owner(path: Path) -> None:
    """Record as owner a process that has ended (its pid and start time, as a real owner's)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    birth = start_time(proc.pid)
    proc.wait()
    (path / tempdirs.OWNER_FILE).write_text(f"{proc.pid} {birth!r}\n")


def test_made_directory_names_this_process(tmp_root: Path) -> None:
    d = tempdirs.make("candidate")
    assert d.parent == tmp_root and d.name.startswith("musaenv-candidate-")
    assert tempdirs.owner_alive(d) is True
    assert tempdirs.sweep() == [] and d.exists()


def test_dead_owner_swept_unless_a_live_process_uses_it(tmp_root: Path) -> None:
    gone, used = tempdirs.make("reference"), tempdirs.make("forkserver")
    for d in (gone, used):
        _dead_owner(d)
        (d / "worker.log").write_text("x")
    assert tempdirs.owner_alive(gone) is False
    # an orphaned worker still running in its directory (its cwd): left until it has ended
    orphan = subprocess.Popen(["sleep", "30"], cwd=used)
    try:
        assert tempdirs.sweep() == [gone]
        assert not gone.exists() and used.exists()
    finally:
        orphan.kill()
        orphan.wait()
    assert tempdirs.sweep() == [used]


def test_open_file_keeps_a_directory(tmp_root: Path) -> None:
    d = tempdirs.make("candidate")
    _dead_owner(d)
    with open(d / "worker.log", "wb"):  # a parent of an older version holding its worker's log
        assert tempdirs.sweep() == []
    assert tempdirs.sweep() == [d]


def test_pid_reused_by_another_process_is_a_dead_owner(tmp_root: Path) -> None:
    d = tempdirs.make("candidate")
    (d / tempdirs.OWNER_FILE).write_text(f"{os.getpid()} 12345.0\n")  # our pid, another start time
    assert tempdirs.owner_alive(d) is False
    assert tempdirs.sweep() == [d]


def test_directories_without_owner_swept_only_when_old(tmp_root: Path) -> None:
    young, old = tmp_root / "musaenv-candidate-young", tmp_root / "musaenv-forkserver-old"
    other = tmp_root / "unrelated-dir"
    for d in (young, old, other):
        d.mkdir()
    past = time.time() - tempdirs.LEGACY_AGE_S - 60
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    assert tempdirs.sweep() == [old]
    assert young.exists() and other.exists()


def test_first_make_sweeps_once(tmp_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_root / "musaenv-reference-stale"
    stale.mkdir()
    _dead_owner(stale)
    monkeypatch.setattr(tempdirs, "_swept", False)
    tempdirs.make("candidate")
    assert not stale.exists()
