"""The README's demo command, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


# What the test suite sets for itself and a user does not: with MUSAENV_CACHE_DIR set the suite never met the
# default ~/.cache/musaenv, under which every build once failed in the sandbox (docs/sandbox.md, step 8b).
_SUITE_ONLY = ("MUSAENV_CACHE_DIR", "MUSAENV_KEY_DIR", "XDG_CACHE_HOME", "MUSAENV_BACKGROUND_WARMUP")


def test_demo_runs_a_repaired_episode(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _SUITE_ONLY}
    env["HOME"] = str(tmp_path / "home")  # a new user: the default cache dir, empty
    out = subprocess.run(
        [sys.executable, "-m", "musaenv.cli", "demo", "--quiet"], capture_output=True, text=True, timeout=900, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "turn 1: verdict compile_error" in out.stdout
    assert "turn 2: verdict correct" in out.stdout
    end = out.stdout.split("episode over: return ", 1)[1]
    # The return printed is the sum of what the env paid per step, and those are the rewards printed per turn.
    paid = [float(x) for x in end.split("paid per step [", 1)[1].split("]", 1)[0].split(",")]
    turns = [float(line.split("reward ", 1)[1].split()[0].rstrip(",")) for line in out.stdout.splitlines()
             if line.startswith("turn ") and "reward " in line]  # fmt: skip
    assert paid == pytest.approx(turns, abs=1e-3) and paid[0] == -1.0
    assert float(end.split(",", 1)[0]) == pytest.approx(sum(paid), abs=2e-3)
