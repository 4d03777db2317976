"""First contact of a GPU with the sandbox: create a context and allocate inside it, layer by layer.

``python -m musaenv.isolation.gpu_probe --device cuda --mb 1024`` runs one child per step, each entering more of
the worker's sandbox before it creates the device context and allocates ``--mb`` MB on the device:

1. ``bare``: no sandbox;
2. ``no_landlock``: the sandbox without Landlock's write restriction (rlimits without RLIMIT_AS, capabilities,
   seccomp);
3. ``full``: the candidate worker's sandbox as the GPU plan sets it (:mod:`musaenv.isolation.gpu_plan`);
4. ``rlimit_as``: the full sandbox plus the 16 GiB ``RLIMIT_AS`` GPU workers used to get (expected to fail on a
   GPU: it shows why the plan has none).

The first step that fails names the layer it added. With ``--device cpu`` the same steps run what the driver does
to the host on a CPU-only machine: reserve 256 GiB of address space (``PROT_NONE``, as CUDA's unified address
space does), start a thread, issue an ``ioctl`` on ``/dev/null``, write the JIT cache directory and touch ``--mb``
MB, so the plan is tested where no GPU is lent. Prints one JSON line per step.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["STEPS", "run_steps"]

STEPS = ("bare", "no_landlock", "full", "rlimit_as")
_OLD_RLIMIT_AS_MB = 16384
_RESERVE_GB = 256


def _host_side(mb: int) -> str:
    """What a CUDA context asks of the host, without a GPU."""
    reserve = mmap.mmap(-1, _RESERVE_GB << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0)  # PROT_NONE
    reserve.close()
    done = threading.Event()
    t = threading.Thread(target=done.set)
    t.start()
    t.join(5)
    if not done.is_set():
        raise RuntimeError("a helper thread did not run")
    import fcntl
    import termios

    with open("/dev/null", "rb") as f:
        try:
            fcntl.ioctl(f, termios.FIONREAD, b"\0\0\0\0")
        except OSError as e:
            if e.errno == 1:  # EPERM: seccomp refused ioctl itself
                raise
    cache = Path(os.environ.get("CUDA_CACHE_PATH", Path.home() / ".nv" / "ComputeCache"))
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "probe").write_bytes(b"x")
    block = bytearray(mb << 20)
    block[:: 1 << 12] = b"\1" * len(block[:: 1 << 12])
    return f"reserved {_RESERVE_GB} GiB, thread, ioctl, JIT cache at {cache}, touched {mb} MB"


def _device_side(device: str, mb: int) -> str:
    import torch

    mod = getattr(torch, device)
    mod.init()
    x = torch.empty(mb << 20, dtype=torch.uint8, device=device)
    x.fill_(1)
    mod.synchronize()
    total = int(x.sum(dtype=torch.int64).item())
    if total != mb << 20:
        raise RuntimeError(f"allocated {mb} MB but read back {total} bytes set")
    return f"{device} context, {mb} MB allocated, filled and read back on {mod.get_device_name(0)}"


def _child(step: str, device: str, mb: int, base: Path) -> dict[str, Any]:
    import torch  # noqa: F401  (imported before the sandbox, as in the worker)

    from musaenv.config import SandboxConfig
    from musaenv.isolation.sandbox import enter_sandbox

    out: dict[str, Any] = {"step": step}
    work = base / step
    work.mkdir(parents=True, exist_ok=True)
    os.environ["CUDA_CACHE_PATH"] = str(work / ".nv" / "ComputeCache")  # the sandbox sets it so too
    if step != "bare":
        cfg = SandboxConfig(address_space_mb=_OLD_RLIMIT_AS_MB if step == "rlimit_as" else 0)
        report = enter_sandbox(cfg, work, restrict_writes=step != "no_landlock")
        out["applied"] = list(report.applied)
        out["not_applied"] = dict(report.not_applied)
    t0 = time.perf_counter()
    try:
        out["detail"] = _host_side(mb) if device == "cpu" else _device_side(device, mb)
        out["ok"] = True
    except BaseException as e:
        out.update(ok=False, error=f"{type(e).__name__}: {e}"[:1000])
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def run_steps(device: str, mb: int, timeout_s: float = 120.0, steps: tuple[str, ...] = STEPS) -> list[dict[str, Any]]:
    """Run ``steps`` (in :data:`STEPS` order), each in its own child; each result has ``ok``, and a failing one
    ``failed_layer`` when the steps before it ran too. ``steps=("full",)`` is the quick check of the plan alone."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="musaenv-gpu-probe-") as base:
        for step in (s for s in STEPS if s in steps):
            res = _step(step, device, mb, base, timeout_s)
            if not res.get("ok") and steps == STEPS:
                res["failed_layer"] = _layer_of(step, results)
            results.append(res)
    return results


def _step(step: str, device: str, mb: int, base: str, timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "musaenv.isolation.gpu_probe", "--child", step, "--device", device]
    cmd += ["--mb", str(mb), "--work", base]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"step": step, "ok": False, "error": proc.stderr[-1000:]}
    except subprocess.TimeoutExpired:
        res = {"step": step, "ok": False, "error": f"no answer within {timeout_s} s"}
    return dict(res)


def _layer_of(step: str, before: list[dict[str, Any]]) -> str:
    """The layer a failing step added over the last step that passed."""
    if step == "bare":
        return "none: the device fails without any sandbox (driver, runtime or torch build)"
    passed = [r["step"] for r in before if r.get("ok")]
    added = {"no_landlock": "rlimits, capabilities or seccomp", "full": "landlock_writes", "rlimit_as": "rlimit_as"}
    if step == "full" and "no_landlock" not in passed:
        return "rlimits, capabilities or seccomp (the step without Landlock failed too)"
    return added[step]


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--mb", type=int, default=1024)
    p.add_argument("--child", choices=STEPS)
    p.add_argument("--work", default="")
    a = p.parse_args(argv)
    if a.child:
        work = Path(a.work or tempfile.mkdtemp(prefix="musaenv-gpu-probe-"))
        sys.stdout.write(json.dumps(_child(a.child, a.device, a.mb, work)) + "\n")
        return 0
    for res in run_steps(a.device, a.mb):
        sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
