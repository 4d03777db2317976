"""Score a model: evaluate a file of generations in bulk and report the field's metrics (``musaenv bench``).

* :mod:`musaenv.bench.metrics`: pass@k, fast_p, Avg@k, geometric-mean speedup (pure Python, no torch);
* :mod:`musaenv.bench.inputs`: read a JSONL of generations or a KernelBench generations folder;
* :mod:`musaenv.bench.runner`: evaluate them through the pool (or Ray), resumable, with duplicates evaluated once;
* :mod:`musaenv.bench.report`: ``summary.json``, ``summary.md``, plots, and the comparison of two runs;
* :mod:`musaenv.bench.compare` (with :mod:`musaenv.bench.stats`): the paired tests that decide whether two runs
  differ, per task and overall (pure Python).

See docs/bench.md for each metric's formula.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BenchOptions", "load_generations", "run_bench", "summarize", "write_reports"]

_LAZY = {
    "BenchOptions": "musaenv.bench.runner",
    "run_bench": "musaenv.bench.runner",
    "load_generations": "musaenv.bench.inputs",
    "summarize": "musaenv.bench.metrics",
    "write_reports": "musaenv.bench.report",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
