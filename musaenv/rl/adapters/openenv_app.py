"""KernelGen-v0 served with openenv-core's own server (``pip install 'musaenv[openenv]'``), and its client.

``musaenv serve`` (or ``python -m musaenv.rl.adapters.openenv_app``) builds the app with openenv-core's
``create_app``: WebSocket sessions on ``/ws`` (one env per session, several sessions at once, all sharing one
:class:`~musaenv.evaluator.pool.EvaluatorPool`), and the stateless HTTP ``/reset``, ``/step``, ``/state``,
``/schema``, ``/health`` and ``/metadata``. A user of OpenEnv writes::

    from musaenv.rl.adapters.openenv_app import KernelGenAction, KernelGenClient

    with KernelGenClient(base_url="http://localhost:8000").sync() as env:
        result = env.reset(task="l1_relu")
        result = env.step(KernelGenAction(code=program))
        print(result.observation.verdict, result.reward, result.done)

OpenEnv's own pattern works as well: ``create_app(KernelGenEnvironment, KernelGenAction, KernelGenObservation)``
(openenv-core calls the class with no arguments; ``functools.partial(KernelGenEnvironment, backend="cpu")`` binds
settings); :func:`quiet_disconnects` keeps ordinary client disconnects at INFO (``make_app`` applies it).

Observations are typed (:class:`KernelGenObservation`): ``prompt`` is the env's observation (the whole transcript,
or only the new message with ``observation="message"``), ``feedback`` the new user message of the turn (the chat
trainers' view), plus ``task_id``, ``turn``, ``verdict``, ``score`` and the ``EvalResult`` dict as ``eval``.
A step with no episode in progress (the stateless HTTP ``/step``, which builds a fresh env per request) first starts
one on the action's ``task``, so ``POST /step`` alone is a one-shot evaluation. A bad candidate is a verdict, never a
server error. The server binds 127.0.0.1 by default: candidate code runs on this machine (sandboxed).
"""

from __future__ import annotations

import argparse
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field
from starlette import websockets as _ws

from musaenv.env import Evaluator, KernelGenEnv
from musaenv.rl.adapters.shared import shared_evaluator

__all__ = ["KernelGenAction", "KernelGenClient", "KernelGenEnvironment", "KernelGenObservation", "KernelGenState",
           "make_app", "quiet_disconnects", "serve"]  # fmt: skip

log = logging.getLogger(__name__)


class KernelGenAction(Action):
    """One response: a program defining ``class ModelNew`` (fenced block or plain code)."""

    code: str = Field(..., description="The response: a program defining class ModelNew")
    task: str | None = Field(default=None, description="Task of a one-shot step when no episode is in progress")


class KernelGenObservation(Observation):
    """What the policy sees after a reset or a step (``done`` and ``reward`` come from OpenEnv's base)."""

    prompt: str = Field(default="", description="The env's observation: the prompt for the next response")
    feedback: str | None = Field(default=None, description="The new user message of this turn (None after reset)")
    task_id: str = ""
    turn: int = 0
    verdict: str | None = None
    score: float | None = None
    eval: dict[str, Any] | None = Field(default=None, description="The turn's EvalResult as a dict")
    episode_return: float | None = Field(
        default=None, description="The shaped return of the turns played so far: the sum of the rewards paid"
    )


class KernelGenState(State):
    """Episode bookkeeping (``episode_id`` and ``step_count`` come from OpenEnv's base)."""

    task_id: str | None = None
    done: bool = False
    episode_return: float = 0.0
    scores: list[float | None] = Field(default_factory=list)


class KernelGenEnvironment(Environment[KernelGenAction, KernelGenObservation, KernelGenState]):
    """One KernelGen-v0 episode at a time, on an evaluator shared with the other sessions.

    openenv-core builds its sessions by calling the class it is given with no arguments, so every argument is
    optional: ``create_app(KernelGenEnvironment, KernelGenAction, KernelGenObservation)`` serves the defaults, and
    ``functools.partial(KernelGenEnvironment, backend="cpu", max_turns=3)`` in its place serves those settings.

    Args:
        evaluator: The evaluator (thread-safe, e.g. an ``EvaluatorPool``); not closed here. Default: the pool
            shared by every session with the same ``backend`` and ``eval_config``
            (:func:`~musaenv.rl.adapters.shared.close_shared_evaluators` closes it).
        **env_kwargs: :class:`~musaenv.env.KernelGenEnv` arguments (``task``, ``backend``, ``max_turns``, ...).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # sessions share only the evaluator, which is built for concurrent use

    def __init__(self, evaluator: Evaluator | None = None, **env_kwargs: Any) -> None:
        super().__init__()
        if evaluator is None:
            evaluator = shared_evaluator(env_kwargs.get("backend", "auto"), env_kwargs.get("eval_config"))
        self.env = KernelGenEnv(evaluator=evaluator, **env_kwargs)
        self._state = KernelGenState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
              **kwargs: Any) -> KernelGenObservation:  # fmt: skip
        """Start an episode; ``task`` picks it (default: the server's task, or a sampled one)."""
        obs, info = self.env.reset(seed=seed, options={"task": task} if task else None)
        self._state = KernelGenState(episode_id=episode_id or str(uuid.uuid4()), task_id=info["task_id"])
        return KernelGenObservation(prompt=obs, task_id=info["task_id"])

    def step(self, action: KernelGenAction, timeout_s: float | None = None, **kwargs: Any) -> KernelGenObservation:
        """Evaluate ``action.code`` (starting an episode on ``action.task`` first when none is in progress)."""
        if self._state.episode_id is None or self._state.done:
            self.reset(task=action.task)
        obs, reward, terminated, truncated, info = self.env.step(action.code)
        st = self._state
        st.step_count += 1
        st.done = bool(terminated or truncated)
        st.episode_return += float(reward)
        st.scores = [*st.scores, info["score"]]
        return KernelGenObservation(
            prompt=obs, feedback=info["feedback"], task_id=info["task_id"], turn=info["turn"],
            verdict=info["eval"]["stage"], score=info["score"], eval=info["eval"], done=st.done, reward=float(reward),
            episode_return=info.get("episode_return"), metadata={"terminated": bool(terminated),
                                                                 "truncated": bool(truncated)},
        )  # fmt: skip

    @property
    def state(self) -> KernelGenState:
        """The current episode's bookkeeping."""
        return self._state

    def close(self) -> None:
        """Close the env (the shared evaluator stays open)."""
        self.env.close()


def make_app(
    *, evaluator: Evaluator | None = None, max_sessions: int = 8, **env_kwargs: Any
) -> tuple[Any, Callable[[], None]]:
    """The FastAPI app of openenv-core's ``create_app`` for KernelGen-v0, and a function closing its evaluator.

    Args:
        evaluator: Shared by every session (caller closes it); default an ``EvaluatorPool`` on ``backend``.
        max_sessions: Concurrent WebSocket sessions.
        **env_kwargs: :class:`~musaenv.env.KernelGenEnv` arguments of every session.
    """
    owned = evaluator is None
    if evaluator is None:
        from musaenv.evaluator.pool import EvaluatorPool

        evaluator = EvaluatorPool(env_kwargs.get("backend", "auto"), env_kwargs.get("eval_config"))
    shared: Evaluator = evaluator
    lock = threading.Lock()

    def factory() -> KernelGenEnvironment:
        with lock:  # sessions start in executor threads
            return KernelGenEnvironment(shared, **env_kwargs)

    app = create_app(
        factory, KernelGenAction, KernelGenObservation, env_name="musaenv", max_concurrent_envs=max_sessions
    )
    quiet_disconnects(app)

    def close() -> None:
        if owned:
            shared.close()

    return app, close


def _gone_errors() -> tuple[type[BaseException], ...]:
    """What starlette and uvicorn raise into a WebSocket app once its client has left (names vary by version)."""
    found = [getattr(_ws, n, None) for n in ("WebSocketDisconnect", "WebSocketDisconnected")]
    try:
        from uvicorn.protocols.utils import ClientDisconnected

        found.append(ClientDisconnected)
    except ImportError:
        pass
    return tuple(c for c in found if isinstance(c, type) and issubclass(c, BaseException))


_GONE = _gone_errors()


class _QuietDisconnects:
    """ASGI middleware: a WebSocket session whose client has left is logged at INFO, not as a server error.

    openenv-core 0.3's ``/ws`` handler closes the socket (or answers a step) after the client has gone; starlette
    then raises ``WebSocketDisconnect`` (or ``WebSocketDisconnected``), and uvicorn logs "Exception in ASGI
    application" with a traceback at ERROR for what is an ordinary end of a session. The session itself is already
    torn down by then (openenv-core's ``finally``).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except _GONE as exc:
            log.info("WebSocket client %s left (%s)", scope.get("client"), type(exc).__name__)


def quiet_disconnects(app: Any) -> Any:
    """Log ordinary WebSocket disconnects of an openenv-core app at INFO (``make_app`` does it); returns ``app``."""
    app.add_middleware(_QuietDisconnects)
    return app


class KernelGenClient(EnvClient[KernelGenAction, KernelGenObservation, KernelGenState]):
    """OpenEnv client of ``musaenv serve``: ``KernelGenClient(base_url="http://host:8000")`` (async; ``.sync()``)."""

    def _step_payload(self, action: KernelGenAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"}, exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[KernelGenObservation]:
        fields = dict(payload.get("observation", {}))
        obs = KernelGenObservation(**fields, done=payload.get("done", False), reward=payload.get("reward"))
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> KernelGenState:
        return KernelGenState(**payload)


def serve(host: str = "127.0.0.1", port: int = 8000, max_sessions: int = 8, **env_kwargs: Any) -> None:
    """Run the server until interrupted (uvicorn)."""
    import uvicorn

    app, close = make_app(max_sessions=max_sessions, **env_kwargs)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m musaenv.rl.adapters.openenv_app --port N`` (same options as ``musaenv serve``)."""
    from musaenv.rl.adapters.openenv_server import add_serve_arguments

    p = argparse.ArgumentParser(description="Serve KernelGen-v0 with openenv-core (WebSocket /ws and HTTP).")
    add_serve_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    log.info("KernelGen-v0 on http://%s:%d (WebSocket /ws; /reset /step /state /schema /health)", args.host, args.port)
    serve(args.host, args.port, max_sessions=args.max_sessions, task=args.task, backend=args.backend,
          max_turns=args.max_turns, observation=args.observation)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
