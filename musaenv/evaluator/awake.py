"""Timing CPUs kept out of halt while calls are timed (parent side; CPU timing only).

Between two timed calls a worker waits on its pipe, and on a quiet machine its core then halts: a virtual machine's
vCPU leaves the host, a physical core enters a sleep state. The call after the wake-up runs slower for a while
(frequency, caches, the host's scheduling), and a short call pays that more than a long one: paired timing charges
each call its own CPU time, so a 1.4 ms reference call beside a 5.7 ms candidate call read the layernorm speedup as
0.35 on an idle 2-core VM and 0.25-0.28 with busy loops beside it (where no core ever halts).

:func:`awake_cores` takes the timing CPUs and keeps them polling instead of halting, in the first of these forms
the host allows (the form is what it yields, and the result says it: ``extra["cores_awake"]``):

* ``"cpus"``: a resume latency request of 0 us on those CPUs alone (``n/a`` written to
  ``/sys/devices/system/cpu/cpuN/power/pm_qos_resume_latency_us``; root only). The value outlives the writer and
  is shared by the host, so a keeper process writes it and restores it when this process lets go or dies
  (:mod:`.awake_keeper`, which also says how evaluators on one host share it). Measured by hand (2026-12-03,
  docs/scaling.md, run 10): with cpu1 alone held so, gelu and layernorm read flat from idle to loaded, at the level
  without any request; and so did the load benchmark with this code (runs 11-13: every speedup within +-5 % of
  idle, pooled over 3 runs of 5 evaluations per level).
* ``"global"``: a 0 us CPU wake-up latency request for every CPU (``/dev/cpu_dma_latency``, the knob latency
  benchmarks and ``tuned``'s latency-performance profile use; root only), held while a descriptor is open. With it
  idle and loaded layernorm read 0.25-0.27 alike (runs 9 and 10), but polling idle cores seemed to slow a
  vectorised reference (GELU, 1.8-2.3 ms) on this VM, where a halted sibling would not (gelu +13 % / +10 %).
* ``False``: nothing held (no root), timed as before.

``MUSAENV_CORES_AWAKE=0`` opts out (polling cores draw power and, in a VM, host CPU while a timing phase runs).
``MUSAENV_AWAKE_ROOT`` puts the files under another root (tests' fake trees; unset in use). Holders in one process
are counted per CPU set: evaluations that time at once on the same CPUs share one keeper or descriptor, and it ends
with the last of them. A CPU never polls between timing phases (it would poll through the next candidate's build):
the last holder's keeper restores the values when the block ends. It is then parked, not stopped: alive, holding
nothing, and told to hold again by the next block on the same CPUs (a byte each way, about 1 ms), where starting
a keeper costs an interpreter's start (entering the block 15-27 ms, leaving it 3-8 ms, on a quiet 2-vCPU VM,
2026-12-03 and 12-04). A parked keeper exits with this process (end of file on its stdin, :func:`close_parked` at
exit); one that died while parked is replaced by a fresh one.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from musaenv.evaluator.awake_keeper import latency_file

__all__ = ["Awake", "awake_cores", "close_parked", "parked_pids"]

log = logging.getLogger(__name__)

Awake = Literal["cpus", "global", False]
_KEEPER = str(Path(__file__).with_name("awake_keeper.py"))
_START_S = 5.0  # for the keeper's "held": beyond it the mutex is stuck (a stopped keeper) and the global form serves
_STOP_S = 2.0  # for the keeper's restore and exit after it was let go
_lock = threading.Lock()
_said: set[str] = set()  # refusals logged once: a host that refuses a request refuses it every time


@dataclass
class _Hold:
    form: Awake
    keeper: subprocess.Popen[bytes] | None = None
    fd: int | None = None
    count: int = 0
    root: str = ""


_holds: dict[frozenset[int], _Hold] = {}
_parked: dict[tuple[str, frozenset[int]], tuple[int, subprocess.Popen[bytes]]] = {}  # -> (owner's pid, keeper)


def _root() -> str:
    return os.environ.get("MUSAENV_AWAKE_ROOT", "").rstrip("/")


def _say_once(key: str, msg: str, *args: object) -> None:
    if key not in _said:
        _said.add(key)
        log.info(msg, *args)


def _read_answer(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return os.read(proc.stdout.fileno(), 4096) if ready else b""  # one short line, written at once


def _ask(proc: subprocess.Popen[bytes], word: bytes, want: bytes, timeout_s: float) -> bool:
    """Send a keeper ``word`` and wait for its answer: True when it is ``want``."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(word)
    except OSError:
        return False
    return _read_answer(proc, timeout_s) == want


def _unpark(root: str, cpus: frozenset[int]) -> subprocess.Popen[bytes] | None:
    """The keeper parked for ``cpus``, holding again; None when there is none or it did not answer (stopped)."""
    parked = _parked.pop((root, cpus), None)
    if parked is None or parked[0] != os.getpid():  # a forked copy of the table: that keeper is the parent's
        return None
    proc = parked[1]
    if proc.poll() is None and _ask(proc, b"h", b"held\n", _START_S):
        return proc
    _stop_keeper(proc)
    return None


def _park(root: str, cpus: frozenset[int], proc: subprocess.Popen[bytes]) -> None:
    """Let ``cpus`` go (the keeper restores them) and keep the keeper for the next phase; stopped instead when it
    does not answer or another one is parked for them already."""
    if (root, cpus) not in _parked and proc.poll() is None and _ask(proc, b"r", b"released\n", _STOP_S):
        _parked[(root, cpus)] = (os.getpid(), proc)
    else:
        _stop_keeper(proc)


def close_parked() -> None:
    """Stop every parked keeper of this process (at exit; they hold nothing)."""
    with _lock:
        parked = [proc for pid, proc in _parked.values() if pid == os.getpid()]
        _parked.clear()
    for proc in parked:
        _stop_keeper(proc)


atexit.register(close_parked)


def parked_pids() -> set[int]:
    """The process ids of this process's parked keepers (the harness's own standing processes, like an evaluator's
    spare worker)."""
    with _lock:
        return {proc.pid for pid, proc in _parked.values() if pid == os.getpid() and proc.poll() is None}


def _start_keeper(root: str, cpus: frozenset[int]) -> subprocess.Popen[bytes] | None:
    """A keeper holding ``n/a`` on ``cpus`` (:mod:`.awake_keeper`; the parked one when there is one), or None when
    it could not."""
    parked = _unpark(root, cpus)
    if parked is not None:
        return parked
    cmd = [sys.executable, "-I", "-S", _KEEPER, root, *map(str, sorted(cpus))]
    try:  # its own session: a terminal's Ctrl-C reaches the evaluator, which lets go (or dies: end of file)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, bufsize=0)
    except OSError as e:
        _say_once("keeper", "timing CPUs not kept awake alone (keeper: %s)", e)
        return None
    answer = _read_answer(proc, _START_S)
    if answer == b"held\n":
        return proc
    _stop_keeper(proc)
    text = answer.decode(errors="replace").strip() or "no answer"
    _say_once(f"keeper {root}", "timing CPUs %s not kept awake alone (keeper: %s)", sorted(cpus), text)
    return None


def _stop_keeper(proc: subprocess.Popen[bytes]) -> None:
    """Let the keeper go and wait briefly for its restore."""
    if proc.poll() is not None and proc.returncode < 0:
        log.warning("the awake keeper %d was killed (%d) before it was let go", proc.pid, proc.returncode)
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(OSError):  # a byte, not only the close: a forked child may hold a copy of our end
        proc.stdin.write(b"x")
    for end in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            end.close()
    try:
        proc.wait(_STOP_S)
    except subprocess.TimeoutExpired:  # waiting on the mutex, maybe: it restores once it has it
        log.warning("the awake keeper %d did not finish within %.0f s; left to finish alone", proc.pid, _STOP_S)


def _open_global(root: str) -> int | None:
    device = f"{root}/dev/cpu_dma_latency"
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as e:
        _say_once(device, "cores not kept awake while timing (%s: %s); idle-machine timings may read slower", device, e)
        return None
    try:
        os.write(fd, struct.pack("i", 0))  # 0 us: the request lasts while the descriptor is open
    except OSError as e:
        os.close(fd)
        _say_once(device, "cores not kept awake while timing (%s: %s)", device, e)
        return None
    return fd


def _per_cpu_writable(root: str, cpus: frozenset[int]) -> bool:
    return bool(cpus) and all(os.access(latency_file(root, c), os.W_OK) for c in cpus)


def _take(cpus: frozenset[int]) -> _Hold:
    if os.environ.get("MUSAENV_CORES_AWAKE", "1") == "0":
        return _Hold(False)
    root = _root()
    if _per_cpu_writable(root, cpus) and (keeper := _start_keeper(root, cpus)) is not None:
        return _Hold("cpus", keeper=keeper, root=root)
    fd = _open_global(root)
    return _Hold(False) if fd is None else _Hold("global", fd=fd)


def _give(cpus: frozenset[int], hold: _Hold) -> None:
    if hold.keeper is not None:
        _park(hold.root, cpus, hold.keeper)
    if hold.fd is not None:
        os.close(hold.fd)


@contextlib.contextmanager
def awake_cores(cpus: Iterable[int]) -> Iterator[Awake]:
    """Keep the timing CPUs ``cpus`` out of halt for the block (see the module's docstring); yields the form held:
    ``"cpus"`` (those CPUs alone), ``"global"`` (every CPU) or ``False`` (nothing)."""
    key = frozenset(cpus)
    with _lock:
        hold = _holds.get(key)
        if hold is None:
            hold = _holds[key] = _take(key)
        hold.count += 1
    try:
        yield hold.form
    finally:
        with _lock:
            hold.count -= 1
            if hold.count == 0:
                del _holds[key]
                _give(key, hold)
