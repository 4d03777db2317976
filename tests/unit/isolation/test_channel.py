"""The pickle-free worker channel: messages and arrays round-trip, malformed frames are a ProtocolError."""

from __future__ import annotations

import os

import numpy as np
import pytest

from musaenv.isolation.channel import Channel, ProtocolError


def _pair() -> tuple[Channel, Channel]:
    a, (cr, cw) = Channel.pair()
    return a, Channel(cr, cw)


def test_messages_and_arrays_round_trip():
    parent, child = _pair()
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False])]
    child.send({"type": "trial", "x": 1}, arrays)
    msg, got = parent.recv()
    assert msg == {"type": "trial", "x": 1}
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(arrays, got))


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        b'{"_arrays": [{"dtype": "object", "shape": [1]}]}',
        b'{"_arrays": [{"dtype": "float32", "shape": [-1]}]}',
    ],
)
def test_malformed_frames_raise_protocol_error(raw):
    parent, child = _pair()
    child.send_frame(raw)
    with pytest.raises(ProtocolError):
        parent.recv()


def test_closed_peer_is_eof():
    parent, child = _pair()
    child.close()
    with pytest.raises(EOFError):
        parent.recv()
    parent.close()
    assert os.name == "posix"
