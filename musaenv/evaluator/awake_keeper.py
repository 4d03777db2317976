"""The keeper of per-CPU wake-up latency requests: a process of its own, so a killed evaluator leaves nothing behind.

``python -I -S awake_keeper.py ROOT CPU...`` (started by :mod:`.awake`, by path: standard library only, no import of
musaenv) writes ``n/a`` to each CPU's ``ROOT/sys/devices/system/cpu/cpuN/power/pm_qos_resume_latency_us`` (a
resume latency of 0 us: that CPU polls instead of halting; ``0``, the kernel's default, means no constraint), says
``held`` (or ``refused ...``) on its stdout, and waits on its stdin. The byte ``r`` there: it restores the values,
says ``released`` and waits, parked, for ``h`` (hold again: ``held``) so that the next timing phase does not pay
for a new interpreter. Anything else (another byte: the parent let go for good; end of file: the parent is gone,
even killed with SIGKILL), or SIGTERM, SIGINT or SIGHUP, and it restores what it holds and exits. ``ROOT`` is
``""`` in use; tests give a fake tree.

The value outlives whoever wrote it and is one per CPU for the whole host, so keepers on one host (two evaluators,
Ray workers) agree through files in ``ROOT/run/musaenv-awake`` (root's alone; a saved value that outlives a reboot
is the value before it, harmless to restore):
``cpuN.lock``, on which each keeper holding CPU N keeps a shared ``flock``; ``cpuN.saved``, the value before the
first of them; ``mutex``, an exclusive ``flock`` around every change. The first holder (the lock free for an
exclusive ``flock``) saves the value and writes ``n/a``; a releasing keeper drops its lock and, when it can then take
the lock exclusively, was the last: it writes the saved value back and deletes the file. ``flock`` locks end with
their process, so a crash never leaves a holder behind; a saved file with no holder means a keeper died without
restoring (SIGKILL of the keeper itself): the next first holder keeps that saved value as the true one (the ``n/a``
there is ours) and restores it in its turn. Until then the CPU stays at ``n/a``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import stat
import sys
from collections.abc import Iterable, Iterator

POLL = "n/a"  # what pm_qos_resume_latency_us reads for a 0 us request: no idle state deeper than polling
DEFAULT = "0"  # the kernel's default (no constraint): restored when the saved value is missing
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW


def latency_file(root: str, cpu: int) -> str:
    """CPU ``cpu``'s resume latency request under the filesystem root ``root`` (``""``: the real one)."""
    return f"{root}/sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us"


def state_dir(root: str) -> str:
    """Where keepers on one host agree (see the module's docstring)."""
    return f"{root}/run/musaenv-awake"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)  # never created: a missing file is refused
    try:
        os.write(fd, value.encode() + b"\n")
    finally:
        os.close(fd)


def _state(root: str) -> str:
    """The state directory, made if missing and refused unless it is this user's alone (it is written as root)."""
    d = state_dir(root)
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(errno.EPERM, "not a directory of this user's alone", d)
    return d


@contextlib.contextmanager
def _mutex(d: str) -> Iterator[None]:
    fd = os.open(f"{d}/mutex", os.O_RDWR | os.O_CREAT | _FLAGS, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for a few file writes; released by the kernel if we die
        yield
    finally:
        os.close(fd)


def _hold_one(root: str, d: str, cpu: int) -> int:
    """Join CPU ``cpu``'s holders (under the mutex); the first saves the value and writes ``n/a``."""
    fd = os.open(f"{d}/cpu{cpu}.lock", os.O_RDWR | os.O_CREAT | _FLAGS, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            first = True
        except BlockingIOError:
            first = False
        if first:
            saved = f"{d}/cpu{cpu}.saved"
            made = not os.path.exists(saved)  # else a keeper died holding: the saved value is the true one
            if made:
                _write_new(saved, _read(latency_file(root, cpu)))
            try:
                _write(latency_file(root, cpu), POLL)
            except BaseException:
                if made:
                    os.unlink(saved)
                raise
        fcntl.flock(fd, fcntl.LOCK_SH)  # no one can slip in between: every change is under the mutex
        return fd
    except BaseException:
        os.close(fd)
        raise


def _write_new(path: str, value: str) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _FLAGS, 0o600)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)  # a keeper killed meanwhile leaves no half-written saved value


def _release_one(root: str, d: str, cpu: int, fd: int) -> None:
    """Leave CPU ``cpu``'s holders (under the mutex); the last writes the saved value back."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # others still hold it
        saved = f"{d}/cpu{cpu}.saved"
        try:
            value = _read(saved)
        except FileNotFoundError:
            value = DEFAULT
        _write(latency_file(root, cpu), value)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(saved)
    finally:
        os.close(fd)


def hold(root: str, cpus: Iterable[int]) -> dict[int, int]:
    """Hold ``n/a`` on each of ``cpus``; returns the lock descriptor per CPU, for :func:`release`. All or none."""
    d = _state(root)
    held: dict[int, int] = {}
    with _mutex(d):
        try:
            for cpu in sorted(set(cpus)):
                held[cpu] = _hold_one(root, d, cpu)
        except BaseException:
            _release_all(root, d, held)
            raise
    return held


def release(root: str, held: dict[int, int]) -> None:
    """Let go of what :func:`hold` returned; the last holder of a CPU restores its value."""
    d = state_dir(root)
    with _mutex(d):
        _release_all(root, d, held)


def _release_all(root: str, d: str, held: dict[int, int]) -> None:
    failed: OSError | None = None
    for cpu, fd in held.items():
        try:
            _release_one(root, d, cpu, fd)
        except OSError as e:  # the other CPUs are still restored
            failed = failed or e
    if failed is not None:
        raise failed


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # the parent is gone: its end of file on our stdin follows
        os.write(1, line.encode() + b"\n")


def _command(wake: int) -> bytes:
    """The parent's next byte; ``b""`` at end of file or when a signal arrived (its byte on ``wake``)."""
    while True:
        ready, _, _ = select.select([0, wake], [], [])
        if wake in ready:
            return b""
        if ready:
            try:
                return os.read(0, 1)
            except OSError:
                return b""


def main(argv: list[str]) -> int:
    root, cpus = argv[0], [int(c) for c in argv[1:]]
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for s in _SIGNALS:  # no exception from a handler: nothing interrupts a hold or a restore half-way
        signal.signal(s, lambda *_: None)
    held: dict[int, int] | None = None
    try:
        while True:
            try:
                held = hold(root, cpus)
            except OSError as e:
                _say(f"refused {e}")
                return 1
            _say("held")
            if _command(wake_r) != b"r":  # let go for good, the parent gone, or a signal
                return 0
            release(root, held)
            held = None
            _say("released")
            if _command(wake_r) != b"h":  # parked: nothing held, nothing to restore
                return 0
    finally:
        if held is not None:
            release(root, held)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
