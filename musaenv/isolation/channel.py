"""A private, pickle-free message channel between the evaluator and its worker processes.

Every message is one JSON frame, optionally followed by raw array frames. Nothing is unpickled: a
hostile candidate that writes into the worker's pipe can at worst send malformed data, which the parent
rejects as a protocol error (the candidate's verdict), never code execution in the parent. What the frames
mean is :mod:`.messages`.

Why not :class:`multiprocessing.connection.Connection`: its ``recv`` unpickles, so a hostile peer's bytes would run
code in the parent. Its ``recv_bytes`` would carry the JSON frame, but arrays still need a dtype allow-list and a
size derived from their header before anything is allocated; that is most of this module. A serialisation library
(msgpack, protobuf) would add a dependency inside the sandboxed worker and leave both checks to us all the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import select
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from musaenv.isolation.records import ProtocolError

__all__ = ["Channel", "GiveUp", "ProtocolError", "Stalled"]

MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_ARRAY_BYTES = 8 * 1024 * 1024 * 1024
_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool", "complex64"}
_LEN = struct.Struct("<Q")  # every frame: 8-byte little-endian length, then the payload
_F_SETPIPE_SZ = 1031  # linux/fcntl.h
_PIPE_BYTES = 1 << 20  # the default /proc/sys/fs/pipe-max-size: 16x fewer system calls per array than 64 KiB
_STALL_POLL_S = 0.1  # how often a read or write waiting inside a message asks its ``give_up``

GiveUp = Callable[[], "str | None"]  # asked while a message is stuck: a reason to stop waiting, or None


class Stalled(Exception):
    """The peer stopped in the middle of a message (sending, or reading what this side sends), and the caller's
    ``give_up`` said why (its ``reason``).

    The channel has lost its place in the stream: every later :meth:`Channel.recv` or :meth:`Channel.send` raises
    :class:`ProtocolError`.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"the peer stopped in the middle of a message ({reason})")
        self.reason = reason


def _widen(fd: int) -> None:
    with contextlib.suppress(OSError):  # a lower pipe-max-size only costs speed
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)


class Channel:
    """One end of a worker link: reads from ``rfd`` and writes to ``wfd`` (two one-way pipes)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self._rfd, self._wfd = rfd, wfd
        self._closed = False
        self._lost = ""  # why the stream's place was lost (a :class:`Stalled` read or write)

    @classmethod
    def pair(cls) -> tuple[Channel, tuple[int, int]]:
        """Create pipes; return (this side's channel, (child's read fd, child's write fd)).

        This side writes without blocking (its own open file, not the child's): a child that stops reading, stopped
        or flooding the pipe with messages it never waits answers for, fills it, and a write then waits only as long
        as the ``give_up`` of :meth:`send` allows.
        """
        c_r, p_w = os.pipe()
        p_r, c_w = os.pipe()
        _widen(p_w)
        _widen(c_w)
        os.set_blocking(p_w, False)
        return cls(p_r, p_w), (c_r, c_w)

    def _wait(self, writing: bool, give_up: GiveUp | None) -> None:
        """Wait until the pipe can be read (or, ``writing``, written), asking ``give_up`` every
        :data:`_STALL_POLL_S` meanwhile; a reason it returns raises :class:`Stalled` and loses the stream."""
        fds: tuple[list[int], list[int]] = ([], [self._wfd]) if writing else ([self._rfd], [])
        while not any(select.select(*fds, [], _STALL_POLL_S)[:2]):
            reason = give_up() if give_up is not None else None
            if reason is not None:
                self._lost = reason
                raise Stalled(reason)

    def _in_place(self) -> None:
        if self._lost:
            raise ProtocolError(f"the channel lost its place when a message stalled ({self._lost})")

    def _write_all(self, data: memoryview, give_up: GiveUp | None) -> None:
        while len(data):
            try:
                data = data[os.write(self._wfd, data) :]
            except BlockingIOError:  # the peer's pipe is full (this side writes without blocking: see pair)
                self._wait(True, give_up)

    def send_frame(self, payload: bytes | memoryview, give_up: GiveUp | None = None) -> None:
        """Write one raw frame (a length and the bytes); :meth:`send` is built on it."""
        self._write_all(memoryview(_LEN.pack(len(payload))), give_up)
        self._write_all(memoryview(payload).cast("B"), give_up)

    def send(
        self,
        msg: dict[str, Any],
        arrays: list[np.ndarray] | None = None,
        give_up: GiveUp | None = None,
    ) -> None:
        """Send a JSON-safe dict, then each array as raw bytes (C order).

        ``give_up`` is asked every fraction of a second while the peer's pipe stays full (as in :meth:`recv`); a
        reason ends the send with :class:`Stalled` and the stream is lost. Without it a full pipe waits as long as
        it takes.
        """
        self._in_place()
        arrays = [np.ascontiguousarray(a) for a in arrays or []]
        header = dict(msg)
        header["_arrays"] = [{"dtype": str(a.dtype), "shape": list(a.shape)} for a in arrays]
        self.send_frame(json.dumps(header).encode(), give_up)
        for a in arrays:
            self.send_frame(a.reshape(-1).view(np.uint8).data, give_up)

    def poll(self, timeout_s: float | None) -> bool:
        """True when a message is ready (or the peer closed) within ``timeout_s``."""
        r, _, _ = select.select([self._rfd], [], [], timeout_s)
        return bool(r)

    def recv_before(self, deadline: float, give_up: GiveUp) -> tuple[dict[str, Any], list[np.ndarray]] | None:
        """The next message, or ``None`` when ``deadline`` (``time.monotonic``) passes before it starts.

        A message once started is read to its end unless the peer stops sending and ``give_up`` (a stage clock's
        ``over``) returns a reason: a stopped or hostile worker never holds the parent inside a half-sent message.

        Raises:
            EOFError: the peer is gone.
            ProtocolError: it sent something malformed.
            Stalled: it stopped inside a message and ``give_up`` gave up (its ``reason``).
        """
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self.poll(remaining):
            return None
        return self.recv(give_up)

    def _read_into(self, buf: memoryview, at_boundary: bool, give_up: GiveUp | None) -> None:
        got = 0
        while got < len(buf):
            if give_up is not None:
                self._wait(False, give_up)
            n = os.readv(self._rfd, [buf[got:]])
            if n == 0:  # the peer is gone (mid-frame too: a truncated message is a dead worker, not a lie)
                raise EOFError("end of file" + ("" if at_boundary and got == 0 else " inside a frame"))
            got += n

    def _recv_frame(self, limit: int, what: str, give_up: GiveUp | None) -> np.ndarray:
        head = bytearray(_LEN.size)
        self._read_into(memoryview(head), at_boundary=True, give_up=give_up)
        (size,) = _LEN.unpack(head)
        if size > limit:
            raise ProtocolError(f"{what} of {size} bytes exceeds the {limit}-byte limit")
        buf = np.empty(size, dtype=np.uint8)
        self._read_into(buf.data, at_boundary=False, give_up=give_up)
        return buf

    def recv(self, give_up: GiveUp | None = None) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Receive one message.

        Args:
            give_up: Asked every fraction of a second while the peer sends nothing; a reason it returns ends the
                read with :class:`Stalled`. Without it a peer that stops half-way through a message (stopped by a
                signal, or a hostile candidate writing a partial frame into its own pipe) blocks the reader forever.

        Raises:
            EOFError: the peer is gone.
            ProtocolError: the message is malformed (or an earlier read stalled and lost the stream's place).
            Stalled: ``give_up`` gave up.
        """
        self._in_place()
        try:
            raw = self._recv_frame(MAX_JSON_BYTES, "message", give_up)
            msg = json.loads(raw.tobytes())
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ProtocolError(f"malformed message: {e}") from None
        if not isinstance(msg, dict):
            raise ProtocolError("message is not a JSON object")
        specs = msg.pop("_arrays", [])
        arrays = [self._recv_array(s, give_up) for s in specs] if isinstance(specs, list) else []
        return msg, arrays

    def _recv_array(self, spec: Any, give_up: GiveUp | None) -> np.ndarray:
        try:
            dtype = str(spec["dtype"])
            shape = [int(d) for d in spec["shape"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"bad array header: {e}") from None
        if dtype not in _DTYPES or any(d < 0 for d in shape):
            raise ProtocolError(f"bad array header: {spec!r}")
        expected = math.prod(shape) * np.dtype(dtype).itemsize  # exact: Python integers do not wrap
        if expected > MAX_ARRAY_BYTES:
            raise ProtocolError(f"array of {expected} bytes exceeds the {MAX_ARRAY_BYTES}-byte limit")
        try:  # the header's size bounds the frame, so a lying length never makes the parent allocate more
            raw = self._recv_frame(expected, "array frame", give_up)
        except OSError as e:
            raise ProtocolError(f"array frame: {e}") from None
        if raw.size != expected:
            raise ProtocolError(f"array frame has {raw.size} bytes, header says {expected}")
        return raw.view(dtype).reshape(shape)

    def close(self) -> None:
        """Close both pipe ends (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for fd in (self._rfd, self._wfd):
            with contextlib.suppress(OSError):
                os.close(fd)
