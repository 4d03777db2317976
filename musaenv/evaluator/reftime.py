"""Cached reference timings (``TimingConfig.reference="dedicated_host"``): a reference is timed once per machine.

An entry is keyed by the task, its first shape, the device, the host, the torch version, the threads, the timing
settings and the timing method with its version (:attr:`~musaenv.timing.method.TimingMethod.key`), so changing how
a method measures re-measures instead of comparing with times measured the old way. Entries are kept in memory and
on disk as sealed records (:mod:`musaenv.isolation.integrity`): one that fails its seal is re-measured.
"""

from __future__ import annotations

import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path

from musaenv.config import TimingConfig
from musaenv.evaluator.plan import EvalPlan
from musaenv.isolation.integrity import read_sealed, write_sealed
from musaenv.tasks.task import Task
from musaenv.timing.method import TimingMethod
from musaenv.types import TimingStats

__all__ = ["RefTimeCache"]


class RefTimeCache:
    """The reference timings of one reference service, under ``directory`` (nothing is cached unless ``method``
    caches the reference)."""

    def __init__(
        self, directory: Path, device: str, cpu_threads: int, timing: TimingConfig, method: TimingMethod
    ) -> None:
        self.directory = directory
        self.device, self.cpu_threads, self.timing, self.method = device, cpu_threads, timing, method
        self._memo: dict[str, tuple[TimingStats, str]] = {}

    def key(self, task: Task, plan: EvalPlan) -> str:
        """The entry's name for ``task`` at ``plan``'s first shape on this machine."""
        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            torch_version = "none"
        parts = [
            task.source_hash,
            json.dumps(plan.shapes[0], sort_keys=True),
            self.device,
            platform.node(),
            torch_version,
            str(self.cpu_threads),
            self.timing.to_json(),
            self.method.key,
        ]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]

    def get(self, task: Task, plan: EvalPlan) -> tuple[TimingStats, str] | None:
        """The cached timing and its note, or ``None`` (not cached, unreadable, forged, or the method never caches)."""
        if not self.method.caches_reference:
            return None
        key = self.key(task, plan)
        if key not in self._memo:
            d = read_sealed(self.directory / f"{key}.json", f"reftime:{key}")  # a forged entry is re-measured
            if d is None:
                return None
            try:
                self._memo[key] = (TimingStats.from_dict(d), str(d.get("note", "")))
            except (ValueError, KeyError, TypeError, AttributeError):
                return None
        return self._memo[key]

    def put(self, task: Task, plan: EvalPlan, stats: TimingStats, note: str) -> None:
        """Keep ``stats`` (and the baseline's ``note``) for ``task`` at ``plan``'s first shape, sealed on disk."""
        key = self.key(task, plan)
        self._memo[key] = (stats, note)
        body = {**stats.to_dict(), **({"note": note} if note else {})}
        write_sealed(self.directory / f"{key}.json", f"reftime:{key}", body)
