"""Every example runs with ``--smoke`` as a user runs it: a subprocess, the real verifier, exit status 0.

The subprocesses inherit ``MUSAENV_CACHE_DIR`` from tests/conftest.py, so the one C++ build they need (l1_relu's
shipped solution) is compiled once per machine and reused by every example and test.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def run_example(name: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--smoke"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 0, f"{name} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} (pip install {module.replace('_', '-')})")


def test_every_example_is_smoke_tested() -> None:
    tested = {"random_agent.py", "scripted_agent.py", "sb3_ppo.py", "grpo_tiny.py", "custom_optimizer.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_random_agent() -> None:
    out = run_example("random_agent.py")
    assert "episode 0 l1_relu turn 1:" in out and "mean return over 1 episode(s)" in out


def test_scripted_agent_repairs_and_the_reward_prefers_direct_success() -> None:
    out = run_example("scripted_agent.py")
    assert "turn 1: crash -> runtime_error" in out and "turn 2: fast -> correct" in out
    repaired = float(re.search(r"primeecho return with repair: (\S+)", out).group(1))  # type: ignore[union-attr]
    direct = float(re.search(r"primeecho return direct: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert direct > repaired  # PrimeEcho anchors the reward on the first turn


def test_sb3_ppo() -> None:
    needs("stable_baselines3")
    out = run_example("sb3_ppo.py")
    assert "trained 512 steps" in out and "verifier runs" in out
    assert "fast   correct" in out and "cheat  cheating" in out and "prose  format_error" in out


def test_grpo_tiny() -> None:
    needs("transformers")
    out = run_example("grpo_tiny.py")
    assert "step 0: mean return" in out and "step 1: mean return" in out


def test_custom_optimizer() -> None:
    out = run_example("custom_optimizer.py")
    assert "step 2:" in out and "final policy: fast" in out
