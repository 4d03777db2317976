"""The builder's own checks before it builds (the builds themselves: test_loader, test_fastbuild, test_job)."""

from __future__ import annotations

from pathlib import Path

from musaenv.toolchains import builder


def test_a_usable_build_directory_passes(tmp_path: Path) -> None:
    assert builder._unusable(tmp_path) is None
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


def test_an_unusable_build_directory_is_the_harness_fault(tmp_path: Path) -> None:
    why = builder._unusable(tmp_path / "missing")
    assert why is not None and "harness fault" in why
