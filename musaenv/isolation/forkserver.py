"""A fork server: worker processes in milliseconds instead of a fresh interpreter's ~1.5 s torch import.

The server (``python -m musaenv.isolation.forkserver --fd N``) imports torch and the worker's modules once, then
only forks on request. It never runs a torch operation, touches a device or starts a thread of its own, so each
child begins as a freshly started worker would after its imports: one thread, no CUDA context, no candidate code
ever run in it. Each child gets its own session, working directory, log file and channel pipes (sent over a Unix
socket with ``SCM_RIGHTS``), reseeds Python's and numpy's global generators, and then runs the ordinary worker
(:func:`musaenv.worker.candidate.serve`), sandbox included. What it runs and preloads is named by its caller
(:data:`WORKER_ENTRY`, :data:`WORKER_PRELOAD` by default), so this module imports no worker code itself.

Exit statuses are read with ``waitid(WNOWAIT)``: a finished child stays a zombie until the parent *releases* it,
so its pid cannot be reused by an unrelated process while the parent may still signal it.

The client, :class:`ForkServer`, is thread-safe; :func:`acquire` shares one server among evaluators whose workers
would get the same environment (an :class:`~musaenv.evaluator.pool.EvaluatorPool`'s, for example).

Why not :mod:`multiprocessing`'s ``forkserver`` start method: its server unpickles what the client sends, its
children start in multiprocessing's bootstrap (a pickled target and arguments, the resource tracker), and the server
reaps exited children itself, so a pid can be reused while the parent may still signal it. Here a child must start
with nothing but its three descriptors, its own session and working directory, and stay unreaped until released.

Size: server and client of one protocol (fork requests, channels passed with SCM_RIGHTS), kept together so both
sides change in one place.
"""
# Kept whole (~460 lines): the server and its client are the two ends of one protocol (Spawn, ExitQuery,
# Release); together, a change of one end is seen beside the other.

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TypeVar

from musaenv.isolation import messages, tempdirs

__all__ = ["ForkServer", "ForkServerError", "acquire", "release", "renew", "tie_to_parent"]

log = logging.getLogger(__name__)
M = TypeVar("M", bound=messages.Message)

START_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 30.0
_MAX_MSG = 64 * 1024
# The function each child runs, ``module:function`` called as ``function(channel, role)``, and the modules the server
# imports once for every child (torch first: the ~1.5 s import every fresh worker would pay for; the extension
# loader, which brings setuptools: 45-55 ms of every candidate's start, after its request, when left to the child).
WORKER_ENTRY = "musaenv.worker.candidate:serve"
WORKER_PRELOAD = (
    "torch",
    "torch.utils.cpp_extension",
    "musaenv.worker.candidate",
    "musaenv.worker.reference",
    "musaenv.isolation.sandbox",
    "musaenv.verification.runtime_profile",
)
_entry = WORKER_ENTRY  # the server's, set by main()


class ForkServerError(Exception):
    """The fork server could not start a worker (it died, never started, or refused the request)."""


# --------------------------------------------------------------------------------------------- server side


def tie_to_parent(parent_pid: int) -> None:
    """Be killed (SIGKILL) when the parent dies: ``PR_SET_PDEATHSIG``, then the check the man page asks for (the
    parent may have died before the flag was set). Only for children of a single-threaded parent or of the thread
    that outlives them: the kernel sends the signal when the forking *thread* exits."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(70)


def _child(sock: socket.socket, req: messages.Spawn, fds: list[int], server_pid: int) -> int:
    """In the forked child: become a worker on the received descriptors. Returns the exit code."""
    rfd, wfd, logfd = fds
    sock.close()
    os.setsid()
    # Killed with the server: when the client dies, the server kills its workers, but a server killed at the same
    # moment (Ray kills a dead actor's children) would leave them orphaned, a busy candidate spinning on for good.
    # The client reports a worker lost with its server as infra_error (musaenv.evaluator.candidate).
    tie_to_parent(server_pid)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    keep = {0, 1, 2, rfd, wfd}
    for name in os.listdir("/proc/self/fd"):  # nothing of the server's stays open in the worker
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    os.chdir(req.cwd)
    import random

    import numpy as np

    random.seed()  # a fresh interpreter would have drawn these from the OS
    np.random.seed()
    from musaenv.isolation.channel import Channel

    module, _, function = _entry.partition(":")
    serve = getattr(importlib.import_module(module), function)
    return int(serve(Channel(rfd, wfd), req.role))


def _spawn(sock: socket.socket, req: messages.Spawn, fds: list[int]) -> messages.Message:
    if len(fds) != 3 or req.role not in ("candidate", "reference"):
        return messages.Refused(f"spawn needs 3 descriptors and a role, got {len(fds)} and {req.role!r}")
    sys.stdout.flush()
    sys.stderr.flush()
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _child(sock, req, fds, server_pid)
        except BaseException:  # report in the worker's log; the parent sees the exit code
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return messages.Spawned(pid)


def _returncode(pid: int) -> messages.ExitStatus:
    """Exit status without reaping (``WNOWAIT``), as ``Popen.returncode`` spells it; ``None`` while running."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return messages.ExitStatus(None, unknown=True)
    if info is None:
        return messages.ExitStatus(None)
    return messages.ExitStatus(info.si_status if info.si_code == os.CLD_EXITED else -info.si_status)


def _reap(pids: set[int]) -> None:
    for pid in list(pids):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            pids.discard(pid)


def _kill_children(pids: set[int]) -> None:
    """The client is gone (closed, or killed): so are its workers. Each is the leader of its own session and process
    group, and none is reaped yet (a zombie keeps its pid), so these pids are still ours to signal."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def serve_requests(sock: socket.socket) -> None:
    """Answer spawn / returncode / release requests until the client closes the socket; then kill every worker
    not yet released (a killed evaluator takes its workers along; a killed server too, by their death signal)."""
    released: set[int] = set()
    spawned: set[int] = set()
    try:
        _serve(sock, released, spawned)
    finally:
        _reap(released)
        _kill_children(spawned - released)


def _serve(sock: socket.socket, released: set[int], spawned: set[int]) -> None:
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MSG, 3)
        except OSError:
            return
        if not data:
            return
        reply: messages.Message
        try:
            req = messages.decode(json.loads(data), messages.Spawn, messages.ExitQuery, messages.Release)
            if isinstance(req, messages.Spawn):
                reply = _spawn(sock, req, fds)
                if isinstance(reply, messages.Spawned):
                    spawned.add(reply.pid)
            elif isinstance(req, messages.ExitQuery):
                reply = _returncode(req.pid)
            else:
                assert isinstance(req, messages.Release)
                released.add(req.pid)
                spawned.discard(req.pid)
                reply = messages.Released()
        except (ValueError, AttributeError, messages.ProtocolError, OSError) as e:
            reply = messages.Refused(f"bad request: {e}")
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        _reap(released)
        sock.sendall(json.dumps(reply.to_dict()).encode())


def _package_dir() -> str:
    """Where this process imported musaenv from (the server and its clients must agree)."""
    return str(Path(__file__).resolve().parents[1])


def _children_in_bad_fork() -> bool:
    """Whether a child forked now would find CUDA unusable (torch's bad-fork mark, set by any CUDA runtime call
    before the fork, ``is_initialized()`` or not): one probe child answers, so the client can refuse this server."""
    import torch

    in_bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    if in_bad_fork is None or not torch.cuda._is_compiled():
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the server process."""
    p = argparse.ArgumentParser()
    p.add_argument("--fd", type=int, required=True)
    p.add_argument("--entry", default=WORKER_ENTRY)
    p.add_argument("--preload", default=",".join(WORKER_PRELOAD))
    a = p.parse_args(argv)
    sock = socket.socket(fileno=a.fd)
    global _entry
    _entry = a.entry
    # torch.utils.cpp_extension asks torch.cuda.is_available() at import whenever it finds a CUDA toolkit, and that
    # call (cudaGetDeviceCount) marks every later fork a "bad fork": seen on an H200, every forked worker failed
    # with "Cannot re-initialize CUDA in forked subprocess". torch's NVML-based check answers without touching the
    # CUDA runtime; the workers inherit the setting, and their answer is the same.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    for name in filter(None, a.preload.split(",")):  # imported once, for every child
        importlib.import_module(name)

    ready = messages.ForkServerReady(
        protocol=messages.PROTOCOL_VERSION,
        pid=os.getpid(),
        torch=torch.__version__,
        musaenv=_package_dir(),
        threads=len(os.listdir("/proc/self/task")),
        cuda_initialized=bool(torch.cuda.is_initialized()) or _children_in_bad_fork(),
    )
    sock.sendall(json.dumps(ready.to_dict()).encode())
    serve_requests(sock)
    return 0


# --------------------------------------------------------------------------------------------- client side


class ForkServer:
    """Client of one fork-server process, started with environment ``env`` (the workers inherit it).

    Args:
        env: Environment of the server and therefore of every worker it forks.
        entry: ``module:function`` each forked worker runs, as ``function(channel, role)``.
        preload: Modules the server imports once, before any fork.
    """

    def __init__(
        self, env: dict[str, str], entry: str = WORKER_ENTRY, preload: tuple[str, ...] = WORKER_PRELOAD
    ) -> None:
        self.env = dict(env)
        self._lock = threading.Lock()
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._logdir = tempdirs.make("forkserver")
        self._log = open(self._logdir / "server.log", "wb")  # noqa: SIM115 - closed in close()
        server_cmd = [sys.executable, "-m", "musaenv.isolation.forkserver", "--fd", str(theirs.fileno())]
        try:
            self.proc = subprocess.Popen(
                [*server_cmd, "--entry", entry, "--preload", ",".join(preload)],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                # `python -m` puts the cwd before PYTHONPATH: from a directory holding another musaenv checkout
                # the server imported that one (seen: a newer worker protocol under an older parent turned every
                # honest candidate into timed_output_mismatch). A private cwd leaves child_env's path in charge.
                cwd=str(self._logdir),
            )
        finally:
            theirs.close()
        self.ready: messages.ForkServerReady | None = None
        self._started = time.monotonic()
        self._dead = False

    @property
    def alive(self) -> bool:
        """False once the server has died or was closed."""
        return not self._dead and self.proc.poll() is None

    def _recv(self, timeout_s: float) -> dict[str, Any]:
        r, _, _ = select.select([self._sock], [], [], max(timeout_s, 0.0))
        data = self._sock.recv(_MAX_MSG) if r else None
        if not data:
            self._dead = True
            tail = (self._logdir / "server.log").read_text(errors="replace")[-2000:]
            what = "did not answer in time" if data is None else "closed its socket"
            raise ForkServerError(f"the fork server {what}" + (f":\n{tail}" if tail else ""))
        reply: dict[str, Any] = json.loads(data)
        return reply

    def _hello(self) -> messages.ForkServerReady:
        """The server's first message, refused (and the server with it) when its workers would be of other code."""
        hello = self._recv(START_TIMEOUT_S - (time.monotonic() - self._started))
        log.debug("fork server ready: %s", hello)
        self._dead = True  # until every check passed
        if hello.get("protocol") != messages.PROTOCOL_VERSION:  # checked first: its workers would be refused
            raise ForkServerError(
                f"the fork server speaks protocol version {hello.get('protocol')!r}, this process "
                f"version {messages.PROTOCOL_VERSION}; not forking from it"
            )
        try:
            ready = messages.ForkServerReady.from_dict(hello)
        except messages.ProtocolError as e:
            raise ForkServerError(f"the fork server's first message: {e}") from None
        if ready.cuda_initialized:
            raise ForkServerError(
                "the fork server initialised CUDA (or made its forks unusable for CUDA) while importing; "
                "not forking from it"
            )
        if ready.musaenv != _package_dir():  # a worker of other code: false verdicts
            raise ForkServerError(
                f"the fork server imported musaenv from {ready.musaenv}, this process from "
                f"{_package_dir()}; not forking from it"
            )
        self._dead = False
        return ready

    def _call(self, req: messages.Message, answer: type[M], fds: tuple[int, ...] = ()) -> M:
        with self._lock:
            if self._dead:
                raise ForkServerError("the fork server has stopped")
            try:
                if self.ready is None:
                    self.ready = self._hello()
                socket.send_fds(self._sock, [json.dumps(req.to_dict()).encode()], list(fds))
                reply = messages.decode(self._recv(REQUEST_TIMEOUT_S), answer, messages.Refused)
            except (OSError, ValueError, AttributeError, messages.ProtocolError) as e:
                self._dead = True
                raise ForkServerError(f"the fork server failed: {e}") from None
        if isinstance(reply, messages.Refused):
            raise ForkServerError(reply.error)
        assert isinstance(reply, answer)
        return reply

    def spawn(self, role: str, rfd: int, wfd: int, logfd: int, cwd: str) -> int:
        """Fork a worker with these channel ends, log file and working directory; returns its pid."""
        return self._call(messages.Spawn(role=role, cwd=cwd), messages.Spawned, (rfd, wfd, logfd)).pid

    def returncode(self, pid: int) -> int | None:
        """The worker's exit code (negative: killed by that signal); ``None`` while it runs or when unknown."""
        return self._call(messages.ExitQuery(pid), messages.ExitStatus).rc

    def release(self, pid: int) -> None:
        """Let the server reap ``pid`` (after it was killed); its pid may be reused afterwards."""
        with contextlib.suppress(ForkServerError):
            self._call(messages.Release(pid), messages.Released)

    def close(self) -> None:
        """Stop the server (its workers are killed by their own handles)."""
        self._dead = True
        with contextlib.suppress(OSError):
            self._sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        shutil.rmtree(self._logdir, ignore_errors=True)


_SHARED: dict[str, tuple[ForkServer, int]] = {}
_SHARED_LOCK = threading.Lock()


def _key(env: dict[str, str]) -> str:
    return json.dumps(sorted(env.items()))


def acquire(env: dict[str, str]) -> ForkServer:
    """A fork server for workers with environment ``env``, shared with other holders; :func:`release` it."""
    key = _key(env)
    with _SHARED_LOCK:
        server, count = _SHARED.get(key, (None, 0))
        if server is None or not server.alive:
            if server is not None:
                server.close()
            server, count = ForkServer(env), 0
        _SHARED[key] = (server, count + 1)
        return server


def renew(server: ForkServer) -> ForkServer:
    """``server`` while it lives; once it died (or was killed), it is released and a live one for the same
    environment acquired in its place. Every holder renews its own: the candidate side and the reference service
    share one server, and its workers die with it."""
    if server.alive:
        return server
    release(server)
    return acquire(server.env)


def release(server: ForkServer) -> None:
    """Give back a server from :func:`acquire`; the last holder stops it."""
    with _SHARED_LOCK:
        for key, (s, count) in list(_SHARED.items()):
            if s is server:
                if count > 1:
                    _SHARED[key] = (s, count - 1)
                    return
                del _SHARED[key]
        server.close()


@atexit.register
def _close_all() -> None:
    with _SHARED_LOCK:
        for server, _ in _SHARED.values():
            with contextlib.suppress(Exception):
                server.close()
        _SHARED.clear()


if __name__ == "__main__":
    sys.exit(main())
