"""The seccomp program's signal rules, loaded alone in a fresh interpreter (no torch, about a second).

Stop signals are refused by every route a process has to itself; without Landlock's signal scope (``own_pid``)
signals to any other process are refused too, while the worker's signals to itself and its threads still work.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the probe uses x86_64 syscall numbers")

ROOT = Path(__file__).resolve().parents[3]
PROBE = """
import ctypes, json, os, signal, sys, threading
from musaenv.isolation.ctypes_guard import PyGuard
from musaenv.isolation.seccomp import seccomp_program
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
parent, me = os.getppid(), os.getpid()
PyGuard.install_seccomp_program(seccomp_program(False, True, False, True, own_pid=me if sys.argv[1] == "1" else 0))
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
def errno_of(f):
    try:
        f()
        return 0
    except OSError as e:
        return e.errno
def sys_(nr, *a):
    if libc.syscall(nr, *a) < 0:
        raise OSError(ctypes.get_errno(), str(nr))
tid = threading.get_native_id()
print(json.dumps({
    "self_stop": errno_of(lambda: os.kill(me, signal.SIGSTOP)),
    "tgkill_stop": errno_of(lambda: sys_(234, me, tid, signal.SIGTTOU)),
    "self_usr1": errno_of(lambda: os.kill(me, signal.SIGUSR1)),
    "thread_usr1": errno_of(lambda: signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)),
    "parent_probe": errno_of(lambda: os.kill(parent, 0)),
    "tkill_self": errno_of(lambda: sys_(200, tid, 0)),
    "pdeathsig": errno_of(lambda: sys_(157, 1, 0)),  # prctl(PR_SET_PDEATHSIG, 0): outliving the fork server
    "handled": len(got),
}))
"""


def _probe(own_pid: bool) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if own_pid else "0"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_stop_signals_are_refused_and_other_signals_work() -> None:
    r = _probe(own_pid=False)
    assert r["self_stop"] == r["tgkill_stop"] == r["pdeathsig"] == 1, r  # EPERM
    assert r["self_usr1"] == r["thread_usr1"] == r["parent_probe"] == r["tkill_self"] == 0, r
    assert r["handled"] == 2, r


def test_without_signal_scope_only_the_worker_itself_can_be_signalled() -> None:
    r = _probe(own_pid=True)
    assert r["parent_probe"] == r["tkill_self"] == 1, r  # kill(parent), and tkill (a bare tid names anyone)
    assert r["self_stop"] == 1 and r["self_usr1"] == r["thread_usr1"] == 0 and r["handled"] == 2, r
