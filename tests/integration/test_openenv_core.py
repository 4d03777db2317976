"""``musaenv serve`` on openenv-core's server, driven by openenv-core's own clients over WebSocket ``/ws``.

Runs where openenv-core is installed (CI: a venv of its own, since openenv-core and verifiers disagree on ``mcp``).
"""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("openenv.core")
uvicorn = pytest.importorskip("uvicorn")

from musaenv.config import EvalConfig, TimingConfig  # noqa: E402
from musaenv.evaluator.pool import EvaluatorPool  # noqa: E402
from musaenv.rl.adapters.openenv_app import (  # noqa: E402
    KernelGenAction,
    KernelGenClient,
    KernelGenEnvironment,
    KernelGenObservation,
    make_app,
)
from tests.integration.hazards import COMPILE_ERROR_CANDIDATE, hazard_candidate  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
FAST = EvalConfig(static_policy="off", run_timeout_s=30.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))
SESSIONS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, limit_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                return dict(json.loads(r.read()))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    pool = EvaluatorPool("cpu", FAST, compile_workers=1)
    app, close = make_app(evaluator=pool, max_sessions=SESSIONS, backend="cpu", max_turns=2, eval_config=FAST)
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url)
        yield url
    finally:
        srv.should_exit = True
        thread.join(30)
        close()
        pool.close()


def test_concurrent_websocket_sessions_get_their_own_episodes(server: str) -> None:
    responses = [hazard_candidate("relu_ok"), "no code in this answer", COMPILE_ERROR_CANDIDATE,
                 hazard_candidate("relu_ok")]  # fmt: skip
    together = threading.Barrier(SESSIONS, timeout=120)
    out: dict[int, Any] = {}

    def session(i: int) -> None:
        with KernelGenClient(base_url=server, message_timeout_s=300).sync() as env:
            first = env.reset(task="l1_relu", seed=i)
            together.wait()  # all four sessions are open at once
            step = env.step(KernelGenAction(code=responses[i]))
            out[i] = (first, step, env.state())

    threads = [threading.Thread(target=session, args=(i,)) for i in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(400)
    assert sorted(out) == list(range(SESSIONS)), out
    verdicts = [out[i][1].observation.verdict for i in range(SESSIONS)]
    assert verdicts == ["correct", "format_error", "compile_error", "correct"]
    for i, (first, step, state) in out.items():
        assert first.observation.task_id == "l1_relu" and "ModelNew" in first.observation.prompt and not first.done
        assert state.step_count == 1 and state.task_id == "l1_relu" and state.scores == [step.observation.score]
        if verdicts[i] == "correct":  # PrimeEcho pays the whole return at the first-turn success
            assert step.done and step.reward == step.observation.episode_return > 1.0
        else:  # a failed first turn of two: PrimeEcho's R_1 = s_1 = -1 paid at once, the feedback asks again
            assert not step.done and step.reward == -1.0 and "answer again" in (step.observation.feedback or "")
            assert step.observation.episode_return == -1.0 and state.episode_return == -1.0


def test_openenv_generic_client_and_the_http_endpoints(server: str) -> None:
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=server).sync() as env:
        first = env.reset(task="l1_relu")
        step = env.step({"code": "still no code"})
    assert first.observation["task_id"] == "l1_relu" and step.observation["verdict"] == "format_error"
    schema = json.loads(urllib.request.urlopen(f"{server}/schema", timeout=10).read())
    assert "code" in json.dumps(schema["action"]) and "verdict" in json.dumps(schema["observation"])
    body = json.dumps({"action": {"code": "no code", "task": "l1_add"}}).encode()
    req = urllib.request.Request(f"{server}/step", body, {"Content-Type": "application/json"})
    one_shot = json.loads(urllib.request.urlopen(req, timeout=60).read())  # stateless HTTP: a fresh env per request
    assert one_shot["observation"]["task_id"] == "l1_add" and one_shot["observation"]["verdict"] == "format_error"
    # A one-shot step is the whole episode for its client: its reward is the return, -1 (was 0.0, more than the
    # -0.4 of an episode repaired at turn 2).
    assert one_shot["reward"] == -1.0 and one_shot["observation"]["episode_return"] == -1.0


def test_websocket_session_closed_after_turn_1_returns_what_the_shaper_gives_turn_1(server: str) -> None:
    from musaenv.rewards import make_shaper

    with KernelGenClient(base_url=server, message_timeout_s=300).sync() as env:
        env.reset(task="l1_relu", seed=5)
        cut = env.step(KernelGenAction(code="no code in this answer"))
    assert not cut.done and cut.reward == make_shaper("primeecho").episode_return([-1.0]) == -1.0
    with KernelGenClient(base_url=server, message_timeout_s=300).sync() as env:
        env.reset(task="l1_relu", seed=6)
        steps = [env.step(KernelGenAction(code=c)) for c in ("no code here", hazard_candidate("relu_ok"))]
    repaired = sum(float(s.reward or 0.0) for s in steps)
    assert steps[-1].done and repaired == pytest.approx(steps[-1].observation.episode_return)
    assert cut.reward < repaired


def test_openenvs_own_create_app_takes_the_environment_class() -> None:
    """OpenEnv's pattern, ``create_app(EnvClass, ActionCls, ObservationCls)``: openenv-core calls the class with no
    arguments for every session (before: ``TypeError: missing ... 'evaluator'``); ``functools.partial`` sets it up."""
    from fastapi.testclient import TestClient
    from openenv.core.env_server.http_server import create_app

    from musaenv.rl.adapters.shared import close_shared_evaluators

    plain = create_app(KernelGenEnvironment, KernelGenAction, KernelGenObservation, env_name="musaenv")
    configured = functools.partial(KernelGenEnvironment, backend="cpu", max_turns=1, eval_config=FAST)
    app = create_app(configured, KernelGenAction, KernelGenObservation, max_concurrent_envs=2)
    try:
        with TestClient(plain) as client:
            first = client.post("/reset", json={"task": "l1_relu"}).json()
        assert first["observation"]["task_id"] == "l1_relu" and "ModelNew" in first["observation"]["prompt"]
        with TestClient(app) as client, client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"task": "l1_add"}})
            reset = ws.receive_json()["data"]
            ws.send_json({"type": "step", "data": {"code": "no code in this answer"}})
            step = ws.receive_json()["data"]
        assert reset["observation"]["task_id"] == "l1_add"
        # max_turns=1 from the partial: the first failed turn ends the episode with the worst verdict's return
        assert step["observation"]["verdict"] == "format_error" and step["done"] and step["reward"] == -1.0
    finally:
        close_shared_evaluators()


def test_musaenv_serve_command(tmp_path: Any) -> None:
    from openenv.core.generic_client import GenericEnvClient

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "musaenv.cli", "serve", "--port", str(port), "--backend", "cpu",
                             "--task", "l1_relu"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        assert _wait_healthy(url)["status"] == "healthy"
        with GenericEnvClient(base_url=url).sync() as env:
            assert env.reset().observation["task_id"] == "l1_relu"
        from websockets.sync.client import connect

        for _ in range(3):  # clients that leave without openenv-core's "close" message: ordinary, not errors
            with connect(f"ws://127.0.0.1:{port}/ws") as ws:
                ws.send(json.dumps({"type": "reset", "data": {"task": "l1_relu"}}))
                assert json.loads(ws.recv())["type"] == "observation"
        time.sleep(1.0)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    log = err.decode(errors="replace")
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
    assert "WebSocket client" in log and "left" in log, log[-3000:]
