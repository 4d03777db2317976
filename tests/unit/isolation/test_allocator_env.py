"""The workers' allocator settings (``TimingConfig.allocator``): what reaches them, and that glibc obeys it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.errors import ConfigError
from musaenv.evaluator.local import LocalEvaluator
from musaenv.isolation.process import STEADY_MALLOC, allocator_env, worker_env

# Where an 8 MB tensor's memory comes from in a fresh interpreter: glibc's heap ([heap], grown by brk) or a
# mapping of its own (glibc's default threshold for a first large block is 128 KiB).
_WHERE = """
import torch
x = torch.empty(2 << 20)
p = x.data_ptr()
for line in open('/proc/self/maps'):
    lo, hi = (int(v, 16) for v in line.split()[0].split('-'))
    if lo <= p < hi:
        print('heap' if line.rstrip().endswith('[heap]') else 'mapping')
"""


def _where(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", _WHERE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_steady_blocks_come_from_the_heap_and_system_ones_are_mappings(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in STEADY_MALLOC:
        monkeypatch.delenv(k, raising=False)
    assert allocator_env("system") == {}
    assert allocator_env("steady") == STEADY_MALLOC
    assert _where(worker_env(1, allocator_env("steady"))) == "heap"
    assert _where(worker_env(1, allocator_env("system"))) == "mapping"


def test_a_users_own_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    env = allocator_env("steady")
    assert "MALLOC_MMAP_THRESHOLD_" not in env and "MALLOC_TOP_PAD_" in env
    assert worker_env(1, env)["MALLOC_MMAP_THRESHOLD_"] == "65536"


def test_both_workers_get_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in STEADY_MALLOC:
        monkeypatch.delenv(k, raising=False)
    with LocalEvaluator("cpu", EvalConfig(fork_server=False), worker_env={"EXTRA": "1"}) as ev:
        assert ev._worker_env == {**STEADY_MALLOC, "EXTRA": "1"}
        assert ev._reference.extra_env == {**STEADY_MALLOC, "EXTRA": "1"}
    system = EvalConfig(fork_server=False, timing=TimingConfig(allocator="system"))
    with LocalEvaluator("cpu", system) as ev:
        assert ev._worker_env == {}
    with pytest.raises(ConfigError):
        TimingConfig(allocator="jemalloc")


_KEPT = """
import torch
from musaenv.worker.reference import release_free_memory

def rss_mb():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024

base = rss_mb()
blocks = [torch.ones(1 << 20) for _ in range(150)]  # 150 blocks of 4 MB: heap under the steady allocator
del blocks
kept = rss_mb() - base
assert release_free_memory()
print(round(kept), round(rss_mb() - base))
"""


def test_the_reference_worker_gives_freed_heap_pages_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the steady allocator freed blocks stay resident (the point of it); the reference worker trims after each
    request, so the next task's peak (what it adds over the memory held before it) is not hidden by an earlier one's."""
    for k in STEADY_MALLOC:
        monkeypatch.delenv(k, raising=False)
    env = worker_env(1, allocator_env("steady"))
    out = subprocess.run([sys.executable, "-c", _KEPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kept, after = (int(v) for v in out.stdout.split())
    assert kept > 400 and after < 100, out.stdout
