"""The OpenEnv-style HTTP server, driven by a real HTTP client on 127.0.0.1 (no build: only refused responses)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from musaenv.rl.adapters.openenv_server import KernelGenHTTPServer, serve

REPO = Path(__file__).resolve().parents[3]


def call(base: str, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def server():
    srv: KernelGenHTTPServer = serve("127.0.0.1", 0, task="l1_relu", backend="cpu", max_turns=2)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def test_reset_then_a_format_error_step(server) -> None:
    base = server.url
    assert call(base, "GET", "/health") == (200, {"status": "healthy"})
    status, reset = call(base, "POST", "/reset", {"seed": 0, "episode_id": "ep-1"})
    assert status == 200 and reset["done"] is False and reset["reward"] is None
    obs = reset["observation"]
    assert obs["task_id"] == "l1_relu" and obs["turn"] == 0 and "ModelNew" in obs["prompt"]
    assert call(base, "GET", "/state")[1] == {
        "episode_id": "ep-1",
        "step_count": 0,
        "task_id": "l1_relu",
        "done": False,
        "episode_return": 0.0,
        "scores": [],
    }
    status, step = call(base, "POST", "/step", {"action": {"code": "I have no code yet."}})
    assert status == 200 and step["done"] is False and step["reward"] == -1.0  # PrimeEcho online: R_1 = s_1
    assert call(base, "GET", "/state")[1]["episode_return"] == -1.0  # right if the client stops here
    assert step["observation"]["verdict"] == "format_error" and step["observation"]["score"] == -1.0
    assert "Verdict: format_error" in step["observation"]["feedback"]
    assert step["metadata"]["eval"]["stage"] == "format_error"
    status, last = call(base, "POST", "/step", {"action": {"code": "still nothing"}})
    assert last["done"] is True and last["reward"] == pytest.approx(0.0)  # PrimeEcho on (-1, -1): R_2 = R_1
    assert last["metadata"]["episode_return"] == pytest.approx(-1.0)
    state = call(base, "GET", "/state")[1]
    assert state["step_count"] == 2 and state["done"] is True and state["scores"] == [-1.0, -1.0]
    assert call(base, "POST", "/step", {"action": {"code": "x"}})[0] == 409  # episode over: reset first


def test_client_errors_are_json_with_a_status(server) -> None:
    base = server.url
    assert call(base, "POST", "/step", {"action": {"code": "x"}})[0] == 409  # no episode yet
    call(base, "POST", "/reset", {})
    status, err = call(base, "POST", "/step", raw=b"{not json")
    assert status == 400 and "not JSON" in err["error"]
    assert call(base, "POST", "/step", {"action": {"text": "x"}})[0] == 400
    status, err = call(base, "POST", "/step", {"action": {"code": "x", "lang": "c"}})
    assert status == 400 and "lang" in err["error"]
    assert call(base, "POST", "/reset", {"seed": -1})[0] == 400
    assert call(base, "POST", "/reset", {"task": "no_such_task_xyz"})[0] == 400
    assert call(base, "GET", "/nowhere")[0] == 404
    schema = call(base, "GET", "/schema")[1]
    assert schema["action"]["required"] == ["code"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_one_command_starts_the_server() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "musaenv.rl.adapters.openenv_server", "--port", str(port), "--backend", "cpu"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                assert call(base, "GET", "/health")[1] == {"status": "healthy"}
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "server did not answer within 120 s"
                time.sleep(0.2)
        status, reset = call(base, "POST", "/reset", {"seed": 1, "task": "l1_add"})
        assert status == 200 and reset["observation"]["task_id"] == "l1_add"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
