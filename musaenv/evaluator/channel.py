"""A private, pickle-free message channel between the evaluator and its worker processes.

Every message is one JSON frame, optionally followed by raw array frames. Nothing is unpickled: a
hostile candidate that writes into the worker's pipe can at worst send malformed data, which the parent
rejects as a protocol error (the candidate's verdict), never code execution in the parent.
"""

from __future__ import annotations

import contextlib
import json
import os
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

__all__ = ["Channel", "ProtocolError"]

MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_ARRAY_BYTES = 8 * 1024 * 1024 * 1024
_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool", "complex64"}


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message."""


class Channel:
    """One end of a worker link: reads from ``rfd`` and writes to ``wfd`` (two one-way pipes)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self._r = Connection(rfd, readable=True, writable=False)
        self._w = Connection(wfd, readable=False, writable=True)

    @classmethod
    def pair(cls) -> tuple[Channel, tuple[int, int]]:
        """Create pipes; return (this side's channel, (child's read fd, child's write fd))."""
        c_r, p_w = os.pipe()
        p_r, c_w = os.pipe()
        return cls(p_r, p_w), (c_r, c_w)

    def send(self, msg: dict[str, Any], arrays: list[np.ndarray] | None = None) -> None:
        """Send a JSON-safe dict, then each array as raw bytes (C order)."""
        arrays = arrays or []
        header = dict(msg)
        header["_arrays"] = [{"dtype": str(a.dtype), "shape": list(a.shape)} for a in arrays]
        self._w.send_bytes(json.dumps(header).encode())
        for a in arrays:
            self._w.send_bytes(np.ascontiguousarray(a).tobytes())

    def poll(self, timeout_s: float | None) -> bool:
        """True when a message is ready (or the peer closed) within ``timeout_s``."""
        return self._r.poll(timeout_s)

    def recv(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Receive one message. Raises EOFError when the peer is gone, ProtocolError when it is malformed."""
        try:
            raw = self._r.recv_bytes(MAX_JSON_BYTES)
            msg = json.loads(raw)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ProtocolError(f"malformed message: {e}") from None
        if not isinstance(msg, dict):
            raise ProtocolError("message is not a JSON object")
        specs = msg.pop("_arrays", [])
        arrays = [self._recv_array(s) for s in specs] if isinstance(specs, list) else []
        return msg, arrays

    def _recv_array(self, spec: Any) -> np.ndarray:
        try:
            dtype = str(spec["dtype"])
            shape = [int(d) for d in spec["shape"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"bad array header: {e}") from None
        if dtype not in _DTYPES or any(d < 0 for d in shape):
            raise ProtocolError(f"bad array header: {spec!r}")
        try:
            raw = self._r.recv_bytes(MAX_ARRAY_BYTES)
        except OSError as e:
            raise ProtocolError(f"array frame: {e}") from None
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if len(raw) != expected:
            raise ProtocolError(f"array frame has {len(raw)} bytes, header says {expected}")
        return np.frombuffer(raw, dtype=dtype).reshape(shape)

    def close(self) -> None:
        """Close both pipe ends (idempotent)."""
        for c in (self._r, self._w):
            with contextlib.suppress(OSError):
                c.close()
