"""The README's demo command, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_demo_runs_a_repaired_episode():
    out = subprocess.run(
        [sys.executable, "-m", "musaenv.cli", "demo", "--quiet"], capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr
    assert "turn 1: verdict compile_error" in out.stdout
    assert "turn 2: verdict correct" in out.stdout
    assert "episode over: return" in out.stdout
