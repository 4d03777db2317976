"""The parent's reading of a worker's CPU clock (musaenv.evaluator.cpu_watch.ProcessCpuClock).

The kernel sums another process's CPU clock from each thread's runtime as of its last scheduler event: read while
the process is on a core, it lags (by up to a tick, 4 ms at HZ=250). Paired timing reads it the moment a worker's
message arrives, while the worker may still run (it does some bookkeeping after each message before it waits
again); read that way, a 0.3 ms call was once charged 3 ms of the preparation before it and taken for a forged
one. The test plays such a worker: a child that burns CPU, answers, burns a little more and only then waits (its
burning reads no CPU clock of its own, which would bring the kernel's sum up to date). A reading taken as soon as
the answer is in must equal one taken long after, when the child has been waiting all along.
"""

from __future__ import annotations

import os
import time

import pytest

from musaenv.evaluator.cpu_watch import process_cpu_clock

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")

_BURN_S = 0.006  # longer than a scheduler tick, so that ticks land inside
_TAIL_S = 0.003  # the bookkeeping after the answer, during which an unsettled reading lags
_ROUNDS = 30


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds  # the monotonic clock: no CPU-clock read, no accounting update
    while time.perf_counter() < end:
        pass


def _child(go_r: int, say_w: int) -> None:  # pragma: no cover - runs in the forked child
    while os.read(go_r, 1):
        _spin(_BURN_S)
        os.write(say_w, b"y")
        _spin(_TAIL_S)
    os._exit(0)


def test_a_reading_holds_every_cpu_second_the_worker_spends_before_it_waits_again() -> None:
    go_r, go_w = os.pipe()
    say_r, say_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        os.close(go_w)
        os.close(say_r)
        _child(go_r, say_w)
    os.close(go_r)
    os.close(say_w)
    try:
        clock = process_cpu_clock(pid)
        assert clock is not None
        lags = []
        for _ in range(_ROUNDS):
            os.write(go_w, b"x")
            os.read(say_r, 1)
            seen = clock()  # at once, while the child may still be in its tail
            time.sleep(0.02)
            lags.append((clock.raw() - seen) / 1e6)  # the child has been waiting for a while: its sum is current
    finally:
        os.close(go_w)
        os.waitpid(pid, 0)
        os.close(say_r)
    assert all(lag == 0.0 for lag in lags), f"readings behind the settled clock (ms): {[round(x, 3) for x in lags]}"
    assert clock.unsettled == 0
