"""A candidate that stops itself (or its fork server) must get its own verdict, never the host's infra_error.

A worker stopped from outside (a debugger, the OS) uses neither CPU nor own time, so only the wall-clock backstop
ends it, as infra_error (tests/adversarial/test_kill_anywhere.py, test_stopped_worker_is_infra_error). A failing
candidate could use that to trade its negative score for an unscored retry; the sandbox's seccomp program refuses
every route by which a process can send itself a stop signal (musaenv/isolation/seccomp.py). Each candidate below
tries one route, swallows the refusal and returns a wrong answer: it must end ``incorrect`` (or another candidate
verdict), quickly. The backstop is shortened so that a route left open fails the test in seconds, not minutes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage

TASK = "l1_relu"


class SandboxOnlyEvaluator(LocalEvaluator):
    """No static stage: these candidates use ctypes and signals, which the static scan refuses before they run;
    the point here is what the sandbox does when native code gets past the scan."""

    def _static(self, code: str) -> tuple[str, ...]:
        return ()


CANDIDATE_VERDICTS = {Stage.TIMEOUT, Stage.RUNTIME_ERROR, Stage.INCORRECT, Stage.CHEATING}

_TEMPLATE = """
import ctypes, fcntl, os, signal, threading
import torch
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_NR = {"tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "timer_create": 222}

def _sys(name, *args):
    if _libc.syscall(_NR[name], *args) < 0:
        raise OSError(ctypes.get_errno(), name)

def _tty():  # a pty as the controlling terminal (the worker leads its session), then ^Z or TIOCSIG through it
    import struct, termios
    for how in ("rdwr", "rdonly"):
        try:
            if how == "rdwr":
                m, s = os.openpty()
            else:
                m = os.open("/dev/ptmx", os.O_RDONLY)
                fcntl.ioctl(m, 0x40045431, struct.pack("i", 0))
                n = struct.unpack("I", fcntl.ioctl(m, 0x80045430, bytes(4)))[0]
                s = os.open(f"/dev/pts/{n}", os.O_RDONLY)
        except OSError:
            continue
        for send in (lambda: os.write(m, bytes([26])), lambda: fcntl.ioctl(m, 0x40045436, 20),
                     lambda: fcntl.ioctl(s, termios.TIOCSTI, bytes([26]))):
            try:
                send()
            except OSError:
                pass
    raise OSError("no stop")

def _stop():
    me, tid, info = os.getpid(), threading.get_native_id(), ctypes.create_string_buffer(128)
    ROUTE

class ModelNew(torch.nn.Module):
    def forward(self, x):
        try:
            _stop()
        except OSError:
            pass
        return torch.relu(x) + 1.0  # wrong on purpose: the candidate's honest verdict is incorrect
"""

_ROUTES = {
    "kill_sigstop": "os.kill(me, signal.SIGSTOP)",
    "kill_sigtstp": "os.kill(me, signal.SIGTSTP)",
    "killpg_sigttin": "os.killpg(0, signal.SIGTTIN)",
    "raise_signal_sigttou": "signal.raise_signal(signal.SIGTTOU)",
    "pthread_kill_other_thread": (
        "t = threading.Thread(target=threading.Event().wait, args=(2,), daemon=True); t.start()\n"
        "    signal.pthread_kill(t.ident, signal.SIGSTOP)"
    ),
    "tgkill": "_sys('tgkill', me, tid, 19)",
    "tkill": "_sys('tkill', tid, 20)",
    "rt_sigqueueinfo": "_sys('rt_sigqueueinfo', me, 21, info)",
    "rt_tgsigqueueinfo": "_sys('rt_tgsigqueueinfo', me, tid, 22, info)",
    "pidfd_send_signal": "signal.pidfd_send_signal(os.pidfd_open(me), signal.SIGSTOP)",
    "timer_create_sigevent": (
        "ev = ctypes.create_string_buffer(64); ctypes.memmove(ev, (ctypes.c_int * 3)(0, 19, 0), 12)\n"
        "    _sys('timer_create', 1, ev, ctypes.byref(ctypes.c_void_p()))"
    ),
    "fcntl_f_setsig": (
        "r, w = os.pipe(); fcntl.fcntl(r, fcntl.F_SETOWN, me); fcntl.fcntl(r, 10, signal.SIGSTOP)\n"
        "    fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC); os.write(w, b'x')"
    ),
    "controlling_tty": "_tty()",
    "stop_fork_server": "os.kill(os.getppid(), signal.SIGSTOP)",
    "kill_fork_server": "os.kill(os.getppid(), signal.SIGKILL)",
}


@pytest.fixture(scope="module")
def ev() -> Iterator[LocalEvaluator]:
    from musaenv.isolation import limits

    mp = pytest.MonkeyPatch()
    mp.setattr(limits, "BACKSTOP_FACTOR", 1.0)  # a route left open ends at the backstop: seconds, not minutes
    mp.setattr(limits, "BACKSTOP_EXTRA_S", 4.0)
    cfg = EvalConfig(num_trials=2, static_policy="off", runtime_checks=False, run_timeout_s=4.0, timing_timeout_s=4.0,
                     timing=TimingConfig(warmup=1, repeats=2, max_time_s=0.3))  # fmt: skip
    with SandboxOnlyEvaluator("cpu", cfg) as e:
        yield e
    mp.undo()


@pytest.mark.parametrize("route", list(_ROUTES))
def test_a_candidate_cannot_stop_itself_into_infra_error(ev: LocalEvaluator, route: str) -> None:
    t0 = time.monotonic()
    r = ev.evaluate(get_task(TASK), _TEMPLATE.replace("ROUTE", _ROUTES[route]), seed=1)
    took = time.monotonic() - t0
    assert r.stage in CANDIDATE_VERDICTS, r.to_dict()
    assert r.stage is Stage.INCORRECT or route.startswith("kill_fork"), r.to_dict()  # the refusal was swallowed
    assert took < 20, took  # not the backstop
    if route.endswith("fork_server"):  # the server survived: the next candidate still runs on it
        honest = _TEMPLATE.replace("ROUTE", "pass").replace(" + 1.0", "")
        assert ev.evaluate(get_task(TASK), honest, seed=2).stage is Stage.CORRECT


_PIPE_WRITER = """
import fcntl, json, os, struct, time
import torch
def _frame(msg):
    body = json.dumps(msg).encode()
    return struct.pack("<Q", len(body)) + body
def _pipes():  # every pipe it may write but its stdout and stderr: the channel to the parent among them
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and fcntl.fcntl(fd, fcntl.F_GETFL) & 3:
                yield fd
        except OSError:
            pass
class ModelNew(torch.nn.Module):
    def forward(self, x):
        for fd in _pipes():
            try:
                ROUTE
            except OSError:
                pass
        time.sleep(600)
        return torch.relu(x)
"""
_HOLDS = {  # ways to hold the evaluator through the channel itself, and the verdict each must get
    # the start of a message, then silence: the parent reads a started message on only while the limits hold
    "half_message": ('os.write(fd, struct.pack(\'<Q\', 4096) + b\'{"type": "trial", "dtypes": [\')', Stage.TIMEOUT),
    # a stage again and again (each would restart the clock): stages come once each, in order
    "stage_again": (
        "[os.write(fd, _frame({'type': 'stage', 'name': n})) or time.sleep(0.3) for n in ['trials'] * 60]",
        Stage.CHEATING,
    ),
    # requests whose answers it never reads: the parent's answers fill its pipe, and wait only to the limit
    "unread_answers": (
        "[os.write(fd, _frame({'type': 'build', 'spec': {}}) * 1000) for _ in range(100)]",
        Stage.TIMEOUT,
    ),
}


@pytest.mark.parametrize("route", list(_HOLDS))
def test_the_channel_cannot_hold_the_evaluator(ev: LocalEvaluator, route: str) -> None:
    """A candidate can write into the pipe to the parent (it shares the worker's process). Whatever it writes, the
    evaluation ends at the candidate's own limit or as its protocol violation: not at the backstop, never as a hang;
    the next evaluation is right."""
    code, verdict = _HOLDS[route]
    t0 = time.monotonic()
    r = ev.evaluate(get_task(TASK), _PIPE_WRITER.replace("ROUTE", code), seed=1)
    took = time.monotonic() - t0
    assert r.stage is verdict, r.to_dict()
    # the verdict (the candidate's own limit, not the backstop's infra_error) shows the route is closed; this bound
    # only catches a hang (CI saw 24.8 s for unread_answers on a busy 2-core host)
    assert took < 60, took
    honest = _TEMPLATE.replace("ROUTE", "pass").replace(" + 1.0", "")
    assert ev.evaluate(get_task(TASK), honest, seed=2).stage is Stage.CORRECT


_DEMOTED_HANG = """
import os, threading
import torch
def _spin():
    try:
        DEMOTE
    except OSError:
        pass
    while True:
        pass
class ModelNew(torch.nn.Module):
    def forward(self, x):
        spinners = [threading.Thread(target=_spin, daemon=True) for _ in os.sched_getaffinity(0)]
        for t in spinners:
            t.start()
        for t in spinners:
            t.join()  # never: the hang
        return torch.relu(x)
"""
_DEMOTIONS = {
    "sched_idle": "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))",
    "sched_batch_nice_19": (
        "os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)); "
        "os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)"
    ),
}


@pytest.mark.parametrize("demotion", list(_DEMOTIONS))
def test_a_candidate_cannot_demote_itself_into_infra_error(ev: LocalEvaluator, demotion: str) -> None:
    """A hang whose spinning threads made themselves SCHED_IDLE (or batch and nice 19), on a host whose cores are
    busy: the spinners sit on the run queue for nearly the whole stage. Counted as the host's delay, that made the
    candidate's own time stand still and the backstop's unscored infra_error decide (a free retry for a hang); the
    wait of a thread that lowered its own priority is its own, so the hang is the candidate's timeout."""
    import subprocess
    import sys

    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * len(os.sched_getaffinity(0)))
    ]
    try:
        r = ev.evaluate(get_task(TASK), _DEMOTED_HANG.replace("DEMOTE", _DEMOTIONS[demotion]), seed=1)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert r.stage is Stage.TIMEOUT, r.to_dict()
