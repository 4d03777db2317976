"""Cores kept out of halt while calls are timed (parent side; CPU timing only).

Between two timed calls a worker waits on its pipe, and on a quiet machine its core then halts: a virtual machine's
vCPU leaves the host, a physical core enters a sleep state. The call after the wake-up runs slower for a while
(frequency, caches, the host's scheduling), and a short call pays that more than a long one: paired timing charges
each call its own CPU time, so a 1.4 ms reference call beside a 5.7 ms candidate call read the layernorm speedup as
0.35 on an idle 2-core VM and 0.25-0.28 with busy loops beside it (where no core ever halts). Holding a PM QoS
request of 0 us CPU wake-up latency (``/dev/cpu_dma_latency``, the knob latency benchmarks and ``tuned``'s
latency-performance profile use) makes idle cores poll instead of halting, as they do under load: with it held,
idle and loaded read 0.25-0.27 alike (docs/scaling.md, runs 9 and 10). Not free of its own effect: the request
applies to every CPU, and polling idle cores seemed to slow a vectorised reference (GELU, 1.8-2.3 ms) on this VM,
where a halted sibling would not; a request for the timing CPUs alone is the refinement to measure next.

The request needs root (the device is mode 600). Without it nothing is held, the timing is measured as before and
:func:`awake_cores` yields False, which the result says (``extra["cores_awake"]``). ``MUSAENV_CORES_AWAKE=0`` opts
out (polling cores draw power and, in a VM, host CPU while a timing phase runs). One request per process, counted:
evaluations that time at once share it, and it ends with the last of them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections.abc import Iterator

__all__ = ["awake_cores"]

log = logging.getLogger(__name__)

_DEVICE = "/dev/cpu_dma_latency"
_lock = threading.Lock()
_holders = 0
_fd: int | None = None
_refused = False  # said once: a host that refuses the request refuses it every time


def _open() -> int | None:
    global _refused
    if os.environ.get("MUSAENV_CORES_AWAKE", "1") == "0":
        return None
    try:
        fd = os.open(_DEVICE, os.O_WRONLY | os.O_CLOEXEC)
        os.write(fd, struct.pack("i", 0))  # 0 us: the request lasts while the descriptor is open
        return fd
    except OSError as e:
        if not _refused:
            log.info("cores not kept awake while timing (%s: %s); idle-machine timings may read slower", _DEVICE, e)
            _refused = True
        return None


@contextlib.contextmanager
def awake_cores() -> Iterator[bool]:
    """Keep every core out of halt for the block (see the module's docstring); yields whether the request is held."""
    global _holders, _fd
    with _lock:
        if _holders == 0:
            _fd = _open()
        _holders += 1
        held = _fd is not None
    try:
        yield held
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _fd is not None:
                os.close(_fd)
                _fd = None
