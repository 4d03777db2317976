"""The GPU plan checked on the CPU: each sandbox layer against what a CUDA context needs of the host."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from musaenv.config import EvalConfig, SandboxConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.isolation.gpu_plan import gpu_plan, is_gpu_device
from musaenv.isolation.gpu_probe import run_steps


def _layers(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"address_space_mb": 0, "workdir": "/tmp/w", "landlock": True, "nodes": ["/dev/null"]}
    args.update(writable_paths=["/tmp/w", "/dev/null"], block_processes=True, max_processes=0)
    args.update(kw)
    return {layer.name: layer for layer in gpu_plan(**args)}


def test_plan_refuses_an_address_space_limit_and_closed_device_nodes():
    assert all(layer.ok for layer in _layers().values())
    assert not _layers(address_space_mb=16384)["rlimit_as"].ok
    closed = _layers(writable_paths=["/tmp/w"])["device_nodes"]
    assert not closed.ok and "/dev/null" in closed.detail
    assert _layers(writable_paths=["/tmp/w"], landlock=False)["device_nodes"].ok  # no Landlock: nothing closed


def test_gpu_workers_get_no_address_space_limit():
    for device, expected in (("cuda", 0), ("musa", 0)):
        fake = SimpleNamespace(backend=SimpleNamespace(device=device), config=EvalConfig())
        assert LocalEvaluator._memory_budget_mb(fake, None, None) == expected  # type: ignore[arg-type]
    assert is_gpu_device("cuda:1") and is_gpu_device("musa") and not is_gpu_device("cpu")
    assert SandboxConfig().device_memory_fraction == 0.5


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux only")
def test_host_side_of_a_context_survives_each_layer_and_only_rlimit_as_fails_it():
    """What CUDA asks of the host (256 GiB of reserved address space, a thread, an ioctl, a JIT cache, touched
    memory) inside the real sandbox, step by step: every layer of the plan passes; the old 16 GiB RLIMIT_AS fails."""
    steps = {r["step"]: r for r in run_steps("cpu", 64)}
    assert steps["bare"]["ok"] and steps["no_landlock"]["ok"], steps
    assert steps["full"]["ok"], steps["full"]
    assert "landlock_writes" in steps["full"]["applied"] and "seccomp_processes" in steps["full"]["applied"]
    assert "rlimit_as" not in steps["full"]["applied"]
    assert not steps["rlimit_as"]["ok"] and steps["rlimit_as"]["failed_layer"] == "rlimit_as", steps["rlimit_as"]


def test_gpu_workers_may_write_below_their_own_proc_entry(monkeypatch, tmp_path):
    # On the H200, cuInit under Landlock failed (error 304) until /proc/<pid> was writable; /proc/driver or
    # /proc/sys were not what it needed. Only the worker's own entry, and only where GPU nodes exist.
    from musaenv.isolation import sandbox

    monkeypatch.setattr(sandbox, "_GPU_NODES", ())
    assert f"/proc/{os.getpid()}" not in sandbox._writable_paths(tmp_path, [])
    monkeypatch.setattr(sandbox, "_GPU_NODES", ("/dev/zero",))  # a character device standing for /dev/nvidia0
    paths = sandbox._writable_paths(tmp_path, [])
    assert "/dev/zero" in paths and f"/proc/{os.getpid()}" in paths
    assert not [p for p in paths if p.startswith("/proc") and p != f"/proc/{os.getpid()}"]
