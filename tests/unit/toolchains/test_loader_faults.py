"""Resource exhaustion during a build is a clear infra_error, never a compile verdict and never an exception."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from musaenv.toolchains.loader import BuildSpec, build_extension


def _spec() -> BuildSpec:
    src = f"#include <torch/extension.h>\n// {uuid.uuid4().hex}\ntorch::Tensor f(torch::Tensor x) {{ return x; }}\n"
    return BuildSpec.from_load_inline({"cpp_sources": src, "functions": ["f"]}, "cpu")


def test_unwritable_cache_is_a_clear_infra_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    out = build_extension(_spec(), timeout_s=60.0, root=blocker / "ext")
    assert not out.ok and out.infra_error, out
    assert "cannot be written" in out.log and "MUSAENV_CACHE_DIR" in out.log


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (needs mount privilege, as root in a container): smaller than any module a build writes."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_filling_during_a_build_is_infra_error(tiny_fs: Path) -> None:
    """Seconds, not minutes: a full disk stops the build at its first tier (before: 6 min of torch's slow path)."""
    spec = _spec()
    out = build_extension(spec, timeout_s=300.0, root=tiny_fs / "ext")
    assert not out.ok and out.infra_error, out  # the object file does not fit: the disk's fault, said so
    assert "No space left on device" in out.log or "cannot be written" in out.log, out.log[-2000:]
    assert not (tiny_fs / "ext" / spec.name / "failed.json").exists()  # never cached as the candidate's error


def test_a_log_that_reads_like_a_full_disk_is_the_candidates_compile_error(tmp_path: Path) -> None:
    """The verdict comes from the builder's own write, not from the text the candidate's source makes GCC print."""
    src = f'#include <torch/extension.h>\n// {uuid.uuid4().hex}\n#error "No space left on device"\n'
    spec = BuildSpec.from_load_inline({"cpp_sources": src + "int f() { return 0; }\n", "functions": ["f"]}, "cpu")
    out = build_extension(spec, timeout_s=120.0, root=tmp_path / "ext")
    assert not out.ok and not out.infra_error, out
    assert "No space left on device" in out.log
    # built once more (the text came back, so it is the source's), then sealed like any compile error
    assert (tmp_path / "ext" / spec.name / "failed.json").exists()
