"""The fork server: workers forked from a process that imported torch once, with fresh-process semantics."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from musaenv.isolation import messages
from musaenv.isolation.forkserver import ForkServer, ForkServerError
from musaenv.isolation.process import WorkerProcess, worker_env


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


@pytest.fixture(scope="module")
def server():
    s = ForkServer(worker_env(1))
    yield s
    s.close()


def test_forked_worker_is_a_fresh_session_holding_only_its_channel(server):
    w = WorkerProcess("candidate", 1, None, server)
    try:
        assert w.forked and w.wait_ready(180)
        _state, ppid, pgrp, session = _stat(w.pid)[:4]
        assert int(ppid) == server.proc.pid and int(pgrp) == int(session) == w.pid  # setsid'd child of the server
        links = [os.readlink(f"/proc/{w.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{w.pid}/fd")]
        assert not [x for x in links if x.startswith("socket:")], links  # the server's socket is not inherited
        assert sum(x.startswith("pipe:") for x in links) == 2  # its two channel ends
        assert len(os.listdir(f"/proc/{w.pid}/task")) == 1  # fork keeps one thread
        assert w.poll() is None
    finally:
        w.close()


def test_exit_codes_and_signals_reach_the_parent(server):
    w = WorkerProcess("candidate", 1, None, server)
    assert w.wait_ready(180)
    w.chan.close()  # EOF before a request: the worker exits cleanly
    assert w.exit_description(wait_s=10) == "the worker exited with code 0"
    w.close()
    w = WorkerProcess("candidate", 1, None, server)
    assert w.wait_ready(180)
    os.kill(w.pid, signal.SIGSEGV)
    assert w.exit_description(wait_s=10) == "the worker was killed by signal SIGSEGV"
    pid = w.pid
    w.close()  # releases the zombie; the server reaps it at its next request
    WorkerProcess("candidate", 1, None, server).close()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and _stat(pid)[1] == str(server.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (Path(f"/proc/{pid}").exists() and _stat(pid)[1] == str(server.proc.pid))


def test_a_dead_server_falls_back_to_a_fresh_interpreter():
    s = ForkServer(worker_env(1))
    s.proc.kill()
    s.proc.wait()
    with pytest.raises(ForkServerError):
        s.spawn("candidate", 0, 1, 2, "/")
    w = WorkerProcess("candidate", 1, None, s)
    try:
        assert not w.forked and w.wait_ready(180)
    finally:
        w.close()
        s.close()


def test_a_server_running_another_musaenv_is_refused(tmp_path):
    # A copy of the package first on the server's path stands for another checkout (the server's cwd once was).
    import shutil

    import musaenv

    shutil.copytree(Path(musaenv.__file__).parent, tmp_path / "musaenv", ignore=shutil.ignore_patterns("*.so"))
    s = ForkServer({**worker_env(1), "PYTHONPATH": str(tmp_path)})
    try:
        with pytest.raises(ForkServerError, match="imported musaenv from"):
            s.spawn("candidate", 0, 1, 2, "/")
        w = WorkerProcess("candidate", 1, None, s)
        try:
            assert not w.forked and w.wait_ready(180)  # a fresh interpreter of this process's musaenv instead
        finally:
            w.close()
    finally:
        s.close()


def test_a_malformed_request_is_refused_by_name_and_the_server_keeps_serving(server):
    """Requests and replies are records: an unknown field is refused (not guessed at), and a refusal is an error."""
    w = WorkerProcess("candidate", 1, None, server)  # the server has said hello and serves
    try:
        assert w.wait_ready(180)
        with server._lock:
            bad = {**messages.ExitQuery(w.pid).to_dict(), "surplus": 1}
            socket.send_fds(server._sock, [json.dumps(bad).encode()], [])
            reply = messages.decode(server._recv(30), messages.Refused)
        assert isinstance(reply, messages.Refused) and "unknown fields ['surplus']" in reply.error
        with pytest.raises(ForkServerError, match="spawn needs 3 descriptors"):
            server._call(messages.Spawn(role="candidate", cwd="/"), messages.Spawned)
        assert server.alive and server.returncode(w.pid) is None  # still answering, the worker still running
    finally:
        w.kill()


def test_a_server_whose_forks_could_not_use_cuda_is_refused(tmp_path):
    # On a GPU machine, torch.utils.cpp_extension's import asked torch.cuda.is_available() and every forked worker
    # then failed with "Cannot re-initialize CUDA in forked subprocess". Here a preloaded module marks the forks
    # the way torch does (its bad-fork flag), on a CPU build made to look CUDA-built.
    (tmp_path / "poison_forks.py").write_text(
        "import torch\ntorch.cuda._is_compiled = lambda: True\ntorch.cuda._is_in_bad_fork = lambda: True\n"
    )
    env = {**worker_env(1), "PYTHONPATH": f"{worker_env(1)['PYTHONPATH']}:{tmp_path}"}
    s = ForkServer(env, preload=("torch", "poison_forks"))
    try:
        with pytest.raises(ForkServerError, match="unusable for CUDA"):
            s.spawn("candidate", 0, 1, 2, "/")
    finally:
        s.close()
