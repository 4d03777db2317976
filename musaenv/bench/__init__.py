"""Score a model: evaluate a file of generations in bulk and report the field's metrics (``musaenv bench``).

* :mod:`musaenv.bench.metrics`: pass@k, fast_p, Avg@k, geometric-mean speedup (pure Python, no torch);
* :mod:`musaenv.bench.inputs`: read a JSONL of generations or a KernelBench generations folder;
* :mod:`musaenv.bench.runner`: evaluate them through the pool (or Ray), resumable, with duplicates evaluated once;
* :mod:`musaenv.bench.report`: ``summary.json``, ``summary.md``, plots, and the comparison of two runs.

See docs/bench.md for each metric's formula.
"""

from __future__ import annotations

__all__ = ["metrics"]
