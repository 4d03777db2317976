"""Cores kept out of halt while timing: the PM QoS request is held for the block, shared, released, optional."""

from __future__ import annotations

import os
import struct

import pytest

from musaenv.evaluator import awake
from musaenv.evaluator.awake import awake_cores

DEVICE = "/dev/cpu_dma_latency"


def _target_us() -> int:
    """The kernel's current CPU wake-up latency target (what every open request adds up to)."""
    fd = os.open(DEVICE, os.O_RDONLY)
    try:
        return int(struct.unpack("i", os.read(fd, 4))[0])
    finally:
        os.close(fd)


def _can_request() -> bool:
    try:
        os.close(os.open(DEVICE, os.O_WRONLY))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _can_request(), reason="needs write access to /dev/cpu_dma_latency (root)")
def test_the_request_holds_for_the_block_is_shared_and_released():
    before = _target_us()
    with awake_cores() as held:
        assert held and _target_us() == 0
        with awake_cores() as inner:  # a second evaluation timing at once shares the one request
            assert inner and awake._holders == 2
        assert _target_us() == 0  # still held by the outer block
    assert _target_us() == before and awake._fd is None


def test_opting_out_or_a_refused_request_holds_nothing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MUSAENV_CORES_AWAKE", "0")
    with awake_cores() as held:
        assert held is False
    monkeypatch.delenv("MUSAENV_CORES_AWAKE")
    monkeypatch.setattr(awake, "_DEVICE", "/nonexistent/cpu_dma_latency")
    with awake_cores() as held:  # no device, or no permission: timed as before, never an error
        assert held is False
    assert awake._holders == 0
