"""The pickle-free worker channel: messages and arrays round-trip, malformed frames are a ProtocolError."""

from __future__ import annotations

import os
import struct
import threading
import time

import numpy as np
import pytest

from musaenv.isolation.channel import Channel, ProtocolError, Stalled


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


@pytest.mark.parametrize("sent", [b"\x10\x00\x00", struct.pack("<Q", 64) + b'{"type"'])
def test_a_message_stopped_half_way_ends_at_give_up_and_loses_the_stream(sent):
    """A peer that stops inside a frame (its length or its payload) holds the reader only until ``give_up`` says so;
    the channel then refuses to read on from a place it no longer knows."""
    parent, child = _pair()
    os.write(child._wfd, sent)
    asked: list[float] = []
    end = time.monotonic() + 0.5

    def give_up() -> str | None:
        asked.append(time.monotonic())
        return "own" if asked[-1] > end else None

    with pytest.raises(Stalled) as caught:
        parent.recv(give_up)
    assert caught.value.reason == "own" and len(asked) >= 3
    assert time.monotonic() - end < 1.0
    child.send({"type": "late"})
    with pytest.raises(ProtocolError, match="lost its place"):
        parent.recv()


def test_a_slow_but_steady_peer_is_read_whole():
    """While ``give_up`` has no reason the reader waits on: a message sent in pieces with pauses is read whole."""
    parent, child = _pair()
    payload = b'{"type": "trial", "n": 1}'
    frame = struct.pack("<Q", len(payload)) + payload

    def send_slowly() -> None:
        for i in range(0, len(frame), 10):
            os.write(child._wfd, frame[i : i + 10])
            time.sleep(0.25)

    writer = threading.Thread(target=send_slowly)
    writer.start()
    asked: list[int] = []
    msg, _ = parent.recv(lambda: asked.append(1) or None)
    writer.join()
    assert msg == {"type": "trial", "n": 1} and asked
