"""Shared test configuration: a build cache that persists between runs, GPU/MUSA markers skipped without hardware."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# One content-addressed build cache for the whole session (and later runs on this machine): compiles are
# the expensive part of these tests, and a cache hit is exactly what a user gets on a second episode.
os.environ.setdefault("MUSAENV_CACHE_DIR", str(Path(tempfile.gettempdir()) / "musaenv-test-cache"))
# Background header builds for a build's own flags only: the common flag sets (minutes of CPU) would compete with
# the suite's timings (tests/unit/toolchains/test_warmup_background.py covers that they are queued).
os.environ.setdefault("MUSAENV_BACKGROUND_WARMUP", "wanted")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _has_musa() -> bool:
    try:
        import torch
        import torch_musa  # noqa: F401
    except ImportError:
        return False
    return bool(torch.musa.is_available())  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda, musa = _has_cuda(), _has_musa()
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU (none visible)"))
        if "musa" in item.keywords and not musa:
            item.add_marker(pytest.mark.skip(reason="needs torch_musa and a Moore Threads GPU"))
