"""A background header build is reaped as soon as it ends (it was a zombie child until the next one started)."""

from __future__ import annotations

import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from musaenv.isolation.proctree import is_zombie
from musaenv.toolchains import admission, warmup


def test_finished_background_build_is_reaped_and_its_directory_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_dir = tmp_path / "warmup-spec"
    spec_dir.mkdir()
    started: list[subprocess.Popen[bytes]] = []

    def spawn(items: Any, timeout_s: float, background: bool) -> tuple[subprocess.Popen[bytes], Path]:
        started.append(subprocess.Popen(["true"]))  # a build that ends at once
        return started[-1], spec_dir

    monkeypatch.setattr(warmup, "_spawn", spawn)
    monkeypatch.setattr(warmup, "try_admit", partial(admission.try_admit, available=lambda: 1e6, root=tmp_path))
    monkeypatch.setattr(warmup, "_BG_PROCS", [])
    monkeypatch.setattr(warmup, "_BG_SEEN", set())
    monkeypatch.setenv("MUSAENV_BACKGROUND_WARMUP", "1")
    warmup.start_background(["split"], {"extra_cflags": ["-O1"]})
    assert started
    deadline = time.monotonic() + 5
    while (started[0].returncode is None or spec_dir.exists()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started[0].returncode == 0 and not is_zombie(started[0].pid)
    assert not spec_dir.exists()
