"""A dependency-free OpenEnv-style HTTP server for KernelGen-v0 (standard library only).

What it lacks, next to ``musaenv serve`` on openenv-core (:mod:`musaenv.rl.adapters.openenv_app`): no WebSocket
``/ws`` (so openenv-core's ``EnvClient``/``GenericEnvClient`` cannot connect to it) and one episode per server,
not concurrent sessions. Use it where openenv-core cannot be installed (``musaenv serve --stdlib``).

Start it with one command::

    python -m musaenv.rl.adapters.openenv_server --port 8000 --backend cpu [--task l1_relu] [--max-turns 3]

Endpoints, shaped as OpenEnv's HTTP server (``openenv.core.env_server``: ``ResetRequest``/``ResetResponse``,
``StepRequest``/``StepResponse``, ``State``), JSON in and out:

* ``POST /reset`` ``{"seed": 0, "episode_id": "...", "task": "l1_relu"}`` (all optional) ->
  ``{"observation": {...}, "reward": null, "done": false}``.
* ``POST /step`` ``{"action": {"code": "<response text>"}}`` ->
  ``{"observation": {...}, "reward": r, "done": d, "metadata": {"eval": {...}, ...}}``.
* ``GET /state`` -> ``{"episode_id", "step_count", "task_id", "done", "episode_return", "scores"}``.
* ``GET /health`` -> ``{"status": "healthy"}``; ``GET /schema`` (JSON schemas of action, observation, state);
  ``GET /metadata``.

An observation is ``{"prompt": <the env's next observation text>, "task_id", "turn", "verdict", "score",
"feedback"}`` (``verdict``, ``score`` and ``feedback`` are ``null`` after a reset). The single action field is
``code``: the response text (a fenced block or plain code). A malformed request answers 400 and a step outside an
episode 409, each with ``{"error": "..."}``; a bad candidate is a verdict, never an HTTP error.

The server holds one env (one episode at a time) behind a lock; requests are served by threads so ``/health`` and
``/state`` answer while a step is being evaluated. It binds 127.0.0.1 by default: candidate code runs on this
machine (in the sandboxed worker), so expose it further only on purpose.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from musaenv.env import Evaluator, KernelGenEnv
from musaenv.errors import MusaEnvError
from musaenv.tasks.prompts import feedback_text

__all__ = ["KernelGenHTTPServer", "OpenEnvSession", "add_serve_arguments", "add_serve_subparser", "main", "serve"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_000_000  # a response is at most 200,000 characters (KernelGen-v0's action space); room for JSON

ACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The response: a program defining class ModelNew"}},
    "required": ["code"],
    "additionalProperties": False,
}
OBSERVATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string"},
        "task_id": {"type": "string"},
        "turn": {"type": "integer"},
        "verdict": {"type": ["string", "null"]},
        "score": {"type": ["number", "null"]},
        "feedback": {"type": ["string", "null"]},
    },
}
STATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "episode_id": {"type": ["string", "null"]},
        "step_count": {"type": "integer"},
        "task_id": {"type": ["string", "null"]},
        "done": {"type": "boolean"},
        "episode_return": {"type": "number"},
        "scores": {"type": "array", "items": {"type": ["number", "null"]}},
    },
}


class RequestError(Exception):
    """A client error: HTTP status and message."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class OpenEnvSession:
    """One KernelGen-v0 env behind the OpenEnv reset/step/state contract (no HTTP here).

    Args:
        env: The env to serve; the session closes it in :meth:`close`.
    """

    def __init__(self, env: KernelGenEnv) -> None:
        self.env = env
        self.lock = threading.Lock()
        self.episode_id: str | None = None
        self.task_id: str | None = None
        self.step_count = 0
        self.done = False
        self.episode_return = 0.0
        self.scores: list[float | None] = []

    def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /reset``: start an episode (``seed``, ``episode_id`` and ``task`` are optional)."""
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise RequestError(HTTPStatus.BAD_REQUEST, f"seed: expected a non-negative integer, found {seed!r}")
        task = body.get("task")
        options = {"task": task} if task is not None else None
        with self.lock:
            try:
                obs, info = self.env.reset(seed=seed, options=options)
            except MusaEnvError as e:
                raise RequestError(HTTPStatus.BAD_REQUEST, str(e)) from None
            self.episode_id = str(body.get("episode_id") or uuid.uuid4())
            self.task_id = info["task_id"]
            self.step_count, self.done, self.episode_return, self.scores = 0, False, 0.0, []
            observation = {"prompt": obs, "task_id": self.task_id, "turn": 0, "verdict": None, "score": None}
            observation["feedback"] = None
        return {"observation": observation, "reward": None, "done": False}

    def step(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /step``: evaluate ``body["action"]["code"]``."""
        action = body.get("action")
        if not isinstance(action, dict) or not isinstance(action.get("code"), str):
            raise RequestError(HTTPStatus.BAD_REQUEST, 'expected {"action": {"code": "<response text>"}}')
        extra = sorted(set(action) - {"code", "metadata"})
        if extra:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"action: unknown fields {extra}; the only field is 'code'")
        with self.lock:
            if self.episode_id is None or self.done:
                raise RequestError(HTTPStatus.CONFLICT, "no episode in progress: POST /reset first")
            obs, reward, terminated, truncated, info = self.env.step(action["code"])
            self.step_count += 1
            self.done = bool(terminated or truncated)
            self.episode_return += float(reward)
            self.scores.append(info["score"])
            feedback = feedback_text(info["eval"], info["score"], self.env.config.feedback_chars)
        observation = {
            "prompt": obs,
            "task_id": info["task_id"],
            "turn": info["turn"],
            "verdict": info["eval"]["stage"],
            "score": info["score"],
            "feedback": feedback,
        }
        metadata = {k: v for k, v in info.items() if k not in ("task_id", "turn", "score")}
        metadata.update(terminated=bool(terminated), truncated=bool(truncated))
        return {"observation": observation, "reward": float(reward), "done": self.done, "metadata": metadata}

    def state(self) -> dict[str, Any]:
        """``GET /state``: the episode's bookkeeping."""
        return {
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "task_id": self.task_id,
            "done": self.done,
            "episode_return": self.episode_return,
            "scores": list(self.scores),
        }

    def close(self) -> None:
        """Close the env (and its evaluator when the env owns it)."""
        self.env.close()


class _Handler(BaseHTTPRequestHandler):
    server: KernelGenHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise RequestError(HTTPStatus.BAD_REQUEST, "body: expected a JSON object")
        return body

    def _dispatch(self, method: str) -> None:
        session = self.server.session
        routes = {
            ("GET", "/health"): lambda: {"status": "healthy"},
            ("GET", "/state"): session.state,
            ("GET", "/schema"): lambda: {
                "action": ACTION_SCHEMA,
                "observation": OBSERVATION_SCHEMA,
                "state": STATE_SCHEMA,
            },
            ("GET", "/metadata"): lambda: {
                "name": "KernelGen-v0",
                "description": "GPU/CPU kernel generation (musaenv)",
            },
            ("POST", "/reset"): lambda: session.reset(self._body()),
            ("POST", "/step"): lambda: session.step(self._body()),
        }
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        handler = routes.get((method, path))
        try:
            if handler is None:
                raise RequestError(HTTPStatus.NOT_FOUND, f"no route {method} {path}")
            self._send(HTTPStatus.OK, handler())
        except RequestError as e:
            self._send(e.status, {"error": str(e)})
        except Exception as e:  # the harness failed: say so, keep serving
            log.exception("%s %s failed", method, path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"})

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")


class KernelGenHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server holding one :class:`OpenEnvSession`.

    Args:
        address: ``(host, port)``; port 0 picks a free port (read it back from ``server_address``).
        session: The session to serve.
    """

    daemon_threads = True

    def __init__(self, address: tuple[str, int], session: OpenEnvSession) -> None:
        super().__init__(address, _Handler)
        self.session = session

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound socket."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def server_close(self) -> None:
        """Stop listening and close the session's env."""
        super().server_close()
        self.session.close()


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    evaluator: Evaluator | None = None,
    **env_kwargs: Any,
) -> KernelGenHTTPServer:
    """Build a server for a new KernelGen-v0 env (``env_kwargs``: ``task``, ``backend``, ``max_turns``, ...).

    The caller runs it (``server.serve_forever()``, e.g. in a thread) and stops it (``shutdown()`` then
    ``server_close()``).
    """
    env = KernelGenEnv(evaluator=evaluator, **env_kwargs)
    return KernelGenHTTPServer((host, port), OpenEnvSession(env))


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``musaenv serve`` (shared by both servers' module entry points)."""
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port, stdlib server only)")
    p.add_argument("--task", default=None, help="task id or KernelBench file (default: chosen per reset)")
    p.add_argument("--backend", default="auto", help="auto, cpu, cuda, triton or musa")
    p.add_argument("--max-turns", type=int, default=3, help="responses per episode")
    p.add_argument("--max-sessions", type=int, default=8, help="concurrent WebSocket sessions (openenv-core)")
    p.add_argument("--observation", default="transcript", choices=["transcript", "message"],
                   help="observation: the whole transcript, or only the new message")  # fmt: skip


def _run_stdlib(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = serve(args.host, args.port, task=args.task, backend=args.backend, max_turns=args.max_turns,
                   observation=args.observation)  # fmt: skip
    log.info("KernelGen-v0 OpenEnv-style server on %s (POST /reset, POST /step, GET /state)", server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.server_close()
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    if args.stdlib:
        return _run_stdlib(args)
    try:
        from musaenv.rl.adapters import openenv_app
    except ImportError as e:
        raise MusaEnvError(f"musaenv serve needs openenv-core ({e}): pip install 'musaenv[openenv]', "
                           "or --stdlib for the single-session HTTP server") from None  # fmt: skip
    return openenv_app.main(_argv_of(args))


def _argv_of(args: argparse.Namespace) -> list[str]:
    out = ["--host", args.host, "--port", str(args.port), "--backend", args.backend, "--max-turns",
           str(args.max_turns), "--max-sessions", str(args.max_sessions),
           "--observation", args.observation]  # fmt: skip
    return out + (["--task", args.task] if args.task else [])


def add_serve_subparser(sub: Any) -> None:
    """Register ``musaenv serve`` on the CLI's subparsers."""
    p = sub.add_parser("serve", help="serve KernelGen-v0 to OpenEnv clients (openenv-core; --stdlib: HTTP only)")
    add_serve_arguments(p)
    p.add_argument("--stdlib", action="store_true", help="the dependency-free single-session HTTP server instead")
    p.set_defaults(func=_cmd_serve)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m musaenv.rl.adapters.openenv_server --port N`` (the stdlib server)."""
    p = argparse.ArgumentParser(description="Serve KernelGen-v0 over OpenEnv-style HTTP (reset/step/state).")
    add_serve_arguments(p)
    return _run_stdlib(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
