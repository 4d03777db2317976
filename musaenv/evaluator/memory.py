"""A candidate worker's memory budget, derived from its task (parent side).

A fixed address-space limit is either too tight for a large task or lets a small one keep gigabytes of ballast
(16 GiB used to: a candidate could hold 6 GiB beside an l1_relu kernel and still be rewarded, and two such
candidates exhaust a 24 GiB host). Instead the reference worker's peak resident memory is measured on each task
(``VmHWM`` after resetting it through ``/proc/<pid>/clear_refs``), and the candidate's ``RLIMIT_AS`` becomes

    worker's address space when ready + memory_factor * (reference's peak - its resident memory before) + headroom

bounded by ``SandboxConfig.address_space_mb`` and by what the host can give every worker at once
(:func:`host_share_mb`: physical memory over two workers, a candidate and a reference, per core). The headroom
covers what the harness itself maps on a first run (profiler, extension loading: ~0.3 GB measured here). Until a
task's reference has run once in this evaluator, the bound alone applies. On the CPU only: CUDA reserves address
space far beyond what it uses, so there an address-space limit measures the driver, not the candidate.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from musaenv.toolchains.faults import oom_kill_count


@dataclass(frozen=True)
class MemoryBudget:
    """A candidate's memory budget, as its result reports it (``EvalResult.extra["memory"]``)."""

    address_space_mb: int
    """The worker's address-space limit (:func:`candidate_budget_mb`)."""
    reference_peak_mb: float | None
    """The reference's measured peak it was derived from (``None``: not measured yet)."""


__all__ = ["MemoryBudget", "PeakMeter", "candidate_budget_mb", "host_share_mb", "oom_kills", "status_mb"]


def status_mb(pid: int, field: str) -> float | None:
    """A ``/proc/<pid>/status`` size field (``VmSize``, ``VmRSS``, ``VmHWM``) in MB; ``None`` when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def oom_kills() -> int | None:
    """Processes the kernel's OOM killer has killed since boot (:func:`musaenv.toolchains.faults.oom_kill_count`);
    ``None`` when unreadable. A worker SIGKILLed while it rose was most likely taken by the OOM killer."""
    return oom_kill_count()


def host_share_mb() -> int:
    """Physical memory over the workers that may run at once (a candidate and a reference per core)."""
    try:
        total_kb = next(int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines()
                        if x.startswith("MemTotal:"))  # fmt: skip
    except (OSError, StopIteration, ValueError):
        return 0
    return int(total_kb / 1024 / (2 * len(os.sched_getaffinity(0))))


def candidate_budget_mb(
    task_peak_mb: float | None, worker_vm_mb: float | None, factor: float, headroom_mb: int, bound_mb: int
) -> int:
    """The candidate's address-space limit in MB (0 = unlimited); see the module docstring."""
    bounds = [b for b in (bound_mb, host_share_mb()) if b > 0]
    bound = min(bounds) if bounds else 0
    if task_peak_mb is None or worker_vm_mb is None:
        return bound
    want = int(worker_vm_mb + factor * task_peak_mb + headroom_mb)
    return min(want, bound) if bound else want


class PeakMeter:
    """Peak resident memory of one run of a long-lived worker (the reference worker)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        with contextlib.suppress(OSError):  # "5" resets VmHWM to the current RSS (proc(5))
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        self.before_mb = status_mb(pid, "VmRSS")

    def task_peak_mb(self) -> float | None:
        """What the run added at its peak over the memory the worker held before it."""
        peak = status_mb(self.pid, "VmHWM")
        if peak is None or self.before_mb is None:
            return None
        return max(0.0, peak - self.before_mb)
