"""MooreEval on Ray: compile tasks on CPU nodes, execution actors pinned to devices, artifacts via the object store.

Per request:

1. **Prebuild** (a ``num_cpus=1`` task, any node): the candidate's ``load_inline`` calls are read statically
   (module-level string constants and literals; nothing of the candidate is executed) and built with
   :func:`~musaenv.toolchains.loader.build_extension` in that node's cache. The built ``.so`` files travel back as
   bytes through Ray's object store.
2. **Execute** (an actor holding a :class:`~musaenv.evaluator.local.LocalEvaluator`, one per device: ``num_gpus=1``
   for CUDA, a custom resource such as ``{"MUSA": 1}`` for Moore Threads cards, ``num_cpus=1`` otherwise): the
   shipped modules are installed into the actor node's cache under their content-hash names, then the candidate is
   evaluated as usual, so its builds are cache hits. A prebuild that guessed wrong only costs time: the names are
   content hashes, so a module can never stand in for different code, and the actor builds what it lacks itself.

No starvation, no hang:

* Prebuild tasks run only when the cluster has a CPU beyond those the executors reserve (checked at start). When
  the executors hold every CPU, they build for themselves and send what they built back with the verdict, so the
  next executor (on any node) gets it shipped: each build set is compiled once per cluster either way
  (:class:`~musaenv.evaluator.ray_artifacts.ArtifactStore`).
* More executors than the cluster can place are allowed: requests go only to actors that have started; the others
  join when resources appear. Starting fails (``MusaEnvError``) only when no actor starts within
  ``start_timeout_s``.
* Every wait is bounded: for a free actor, for a prebuild, for another request's build of the same code, and for
  the execution itself (``request_timeout_s``, by default the sum of the config's stage backstops plus a margin).
  Past a limit the request is an ``infra_error``, never a hang; an actor past the request limit is killed and
  replaced, since a hung evaluation would otherwise hold its device forever.

The other way to share artifacts is a shared filesystem: point ``MUSAENV_CACHE_DIR`` on every node at the same
path (builds are atomic renames, so concurrent writers are safe) and pass ``prebuild=False`` (nothing shipped).

An actor that dies is replaced and its request retried; ``infra_error`` results are retried like in
:class:`~musaenv.evaluator.pool.EvaluatorPool`. Requires ``pip install 'musaenv[ray]'``.

Size: RayEvaluator and its actor pool: one concept (scheduling over a cluster) whose parts share Ray's handles and
the starvation rules.
"""
# Kept whole (~415 lines, a third of them this docstring): the actor pool and the evaluator share one set of
# limits and one retry policy, and the bounded waits listed above are read best beside each other. The seam, if it
# grows: _Executor, _actor_options and _ActorPool into a module of their own.

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from musaenv.backends import BackendInfo, get_backend
from musaenv.config import EvalConfig
from musaenv.errors import MusaEnvError
from musaenv.evaluator.pool import PROGRESS_MIN_BATCH, EvalRequest, request_backstop_s
from musaenv.evaluator.progress import Progress
from musaenv.evaluator.ray_artifacts import (
    ArtifactStore,
    Prebuilt,
    build_names,
    collect_artifacts,
    extract_build_specs,
    install_artifacts,
    run_prebuild,
)
from musaenv.tasks.task import Task
from musaenv.toolchains.buildspec import BuildSpec
from musaenv.types import EvalResult, Stage

__all__ = ["RayEvaluator", "default_request_timeout", "extract_build_specs", "install_artifacts"]

log = logging.getLogger(__name__)

_MARGIN_S = 120.0  # Ray scheduling, actor start-up and object transfer on top of musaenv's own stage limits


class _Executor:
    """Ray actor body: one LocalEvaluator on this actor's device."""

    def __init__(self, backend: str, config_json: str) -> None:
        from musaenv.evaluator.local import LocalEvaluator

        self.ev = LocalEvaluator(backend, EvalConfig.from_json(config_json))

    def info(self) -> BackendInfo:
        """The actor's backend, with the tier its evaluator runs (the driver's ``backend`` and ``tier``)."""
        b = self.ev.backend
        return BackendInfo(b.name, b.device, self.ev.tier, compile_only=b.compile_only)

    def evaluate(self, task: Task, response: str, seed: int, shipped: Any, collect: list[str]
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
        """Install the shipped modules, evaluate, and return the verdict with the ``collect`` modules built here."""
        arts = shipped.artifacts if isinstance(shipped, Prebuilt) else shipped
        install_artifacts(arts or [])
        result = self.ev.evaluate(task, response, seed=seed).to_dict()
        return result, collect_artifacts(collect) if collect else []

    def close(self) -> None:
        self.ev.close()


def _actor_options(backend: str, resources: dict[str, float] | None) -> dict[str, Any]:
    if resources is not None:
        return {"resources": dict(resources), "num_cpus": 1}
    return {**copy.deepcopy(dict(get_backend(backend).ray_resources)), "num_cpus": 1}


def _finished(bar: Progress, label: str, fut: Future[EvalResult]) -> None:
    """A request of a batch ended: no longer named as running, counted with its verdict."""
    bar.end(label)
    bar.update(_verdict(fut))


def _verdict(fut: Future[EvalResult]) -> str:
    """The verdict of a finished request, for progress counts (``error`` when it raised)."""
    exc = fut.exception()
    return "error" if exc is not None else fut.result().stage.value


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MusaEnvError("RayEvaluator needs Ray: pip install 'musaenv[ray]'") from None
    return ray


class _ActorPool:
    """Execution actors: requests go only to started ones; those the cluster cannot place yet wait aside."""

    def __init__(self, ray: Any, make: Callable[[], Any], n: int) -> None:
        self._ray, self._make = ray, make
        self._lock = threading.Lock()
        self._idle: queue.Queue[Any] = queue.Queue()
        self._starting: dict[Any, Any] = {}  # info() ref -> actor not known to be up yet
        self.info: BackendInfo | None = None
        for _ in range(n):
            self._add()

    def _add(self) -> None:
        actor = self._make()
        with self._lock:
            self._starting[actor.info.remote()] = actor

    def _poll(self, timeout_s: float) -> None:
        """Move actors that have started to the idle queue (waiting at most ``timeout_s`` for one)."""
        with self._lock:
            refs = list(self._starting)
        if not refs:
            return
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=timeout_s)
        for ref in ready:
            with self._lock:
                actor = self._starting.pop(ref, None)
            if actor is None:
                continue
            try:
                info = self._ray.get(ref, timeout=5)
            except Exception as e:  # the actor's constructor failed: a machine problem, not a candidate's
                log.warning("an execution actor failed to start: %s", e)
                self._ray.kill(actor)
                continue
            self.info = self.info or info
            self._idle.put(actor)

    def take(self, timeout_s: float) -> Any | None:
        """An idle started actor, or ``None`` when none became free within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with self._lock:
                starting = bool(self._starting)
            if starting:
                self._poll(min(left, 0.5))
            with contextlib.suppress(queue.Empty):
                return self._idle.get(timeout=min(max(left, 0.0), 0.5))

    def give(self, actor: Any) -> None:
        self._idle.put(actor)

    def replace(self, actor: Any) -> None:
        """Kill ``actor`` (dead or stuck) and start a fresh one in its place."""
        with contextlib.suppress(Exception):
            self._ray.kill(actor)
        self._add()

    def close(self) -> None:
        with self._lock:
            starting, self._starting = list(self._starting.values()), {}
        for actor in starting:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        while not self._idle.empty():
            actor = self._idle.get()
            with contextlib.suppress(Exception):  # a dead actor has nothing left to close
                self._ray.get(actor.close.remote(), timeout=60)
            with contextlib.suppress(Exception):
                self._ray.kill(actor)


def default_request_timeout(config: EvalConfig) -> float:
    """Execution backstop of one request: :func:`~musaenv.evaluator.pool.request_backstop_s` of ``config`` (every
    stage limit's own wall-clock backstop, so a loaded host never reaches it) plus a margin for Ray."""
    return request_backstop_s(config) + _MARGIN_S


class RayEvaluator:
    """The evaluator API (``evaluate``, ``submit``, ``evaluate_many``, ``close``) on a Ray cluster.

    Args:
        backend: Backend name, resolved on the execution actors' nodes (``auto`` picks their device).
        config: :class:`EvalConfig`.
        num_executors: Execution actors (one per device; each runs one candidate at a time). Any number is
            accepted: actors the cluster cannot place yet serve once it can.
        executor_resources: Ray resources of an actor instead of the backend's default (e.g. ``{"MUSA": 1}``).
        prebuild: Ship modules between nodes: built in CPU tasks when a CPU is spare, else by the executors.
            ``False`` ships nothing (for a shared ``MUSAENV_CACHE_DIR``).
        max_retries: Extra attempts after an ``infra_error`` result or a dead actor.
        request_timeout_s: Wall-clock backstop of one request's execution (``infra_error``, not retried, past it);
            ``None``: :func:`default_request_timeout` of ``config``, which a loaded host never reaches. A smaller
            value is the caller's own wall-clock cap, which a busy host can hit.
        start_timeout_s: Limit on the first actor's start (``MusaEnvError`` past it) and on a replacement's.
        init_kwargs: Arguments of ``ray.init`` when Ray is not initialised yet (``address=...`` for a cluster).
        executor_env: Extra environment variables of the execution actors (e.g. their ``MUSAENV_CACHE_DIR``).
    """

    def __init__(
        self,
        backend: str = "auto",
        config: EvalConfig | None = None,
        num_executors: int = 1,
        executor_resources: dict[str, float] | None = None,
        prebuild: bool = True,
        max_retries: int = 1,
        request_timeout_s: float | None = None,
        start_timeout_s: float = 300.0,
        init_kwargs: dict[str, Any] | None = None,
        executor_env: dict[str, str] | None = None,
    ) -> None:
        if num_executors < 1:
            raise ValueError(f"num_executors must be >= 1, found {num_executors}")
        self._ray = ray = _import_ray()
        pkg_parent = str(Path(__file__).resolve().parents[2])
        runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in (pkg_parent, os.environ.get("PYTHONPATH", "")) if p)}}  # fmt: skip
        if not ray.is_initialized():
            ray.init(**{"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})})
        self.config = config or EvalConfig()
        self.max_retries, self.start_timeout_s = max_retries, start_timeout_s
        self.request_timeout_s = request_timeout_s or default_request_timeout(self.config)
        self._backend_name = backend
        actor_env = {"env_vars": {**runtime_env["env_vars"], **(executor_env or {})}}
        opts = {
            **_actor_options(backend, executor_resources),
            "runtime_env": actor_env,
            "scheduling_strategy": "SPREAD",
        }
        self.ship = self._ship_mode(prebuild, num_executors * float(opts.get("num_cpus", 0)))
        self._prebuild_fn = ray.remote(num_cpus=1, max_retries=0)(run_prebuild).options(runtime_env=runtime_env)
        actor_cls = ray.remote(max_concurrency=2)(_Executor)  # info() answers while evaluate() runs
        self._pool = _ActorPool(ray, lambda: actor_cls.options(**opts).remote(backend, self.config.to_json()),
                                num_executors)  # fmt: skip
        self._store = ArtifactStore()
        self.stats = {"prebuild_compiles": 0, "shipped_sets": 0}
        first = self._pool.take(start_timeout_s)
        if first is None or self._pool.info is None:
            self._pool.close()
            raise MusaEnvError(
                f"no execution actor started within {start_timeout_s:.0f} s: the cluster has "
                f"{ray.cluster_resources()}, an actor needs {_actor_options(backend, executor_resources)}"
            )
        self._pool.give(first)
        self.backend = self._pool.info
        self.tier = self.backend.tier if self.config.tier == "auto" else self.config.tier
        self.max_in_flight = 2 * num_executors  # one building or waiting while one executes, per actor
        self._capacity = threading.BoundedSemaphore(self.max_in_flight)
        self._threads = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="musaenv-ray")
        self._stats_lock = threading.Lock()
        self._closed = False

    def _ship_mode(self, prebuild: bool, reserved_cpus: float) -> str:
        """``prebuild`` (a CPU is spare for build tasks), ``executor`` (executors build and ship) or ``off``."""
        if not prebuild:
            return "off"
        total = float(self._ray.cluster_resources().get("CPU", 0))
        if total - reserved_cpus >= 1:
            return "prebuild"
        log.info("the executors reserve %.0f of %.0f CPUs: no prebuild tasks (they would starve); executors build "
                 "and ship their modules instead", reserved_cpus, total)  # fmt: skip
        return "executor"

    @property
    def _wait_limit_s(self) -> float:
        """Limit on waiting for a free actor or another request's build: two requests' worth and a start."""
        return 2 * self.request_timeout_s + self.start_timeout_s

    def _specs(self, response: str) -> list[BuildSpec]:
        from musaenv.tasks.parsing import extract_candidate

        if self.ship == "off":
            return []
        code = extract_candidate(response, self.config.max_response_chars).code
        return extract_build_specs(code, self.backend.name) if code else []

    def _prebuilt(self, specs: list[BuildSpec]) -> Any:
        """Run a prebuild task (bounded wait); its reference, or ``None`` when it failed or took too long."""
        ray = self._ray
        ref = self._prebuild_fn.remote(specs, self.config.compile_timeout_s)
        limit = len(specs) * self.config.compile_timeout_s + _MARGIN_S
        try:
            out = ray.get(ref, timeout=limit)  # the device actor is taken only once its modules are built
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            log.warning("a prebuild took over %.0f s: the executor builds for itself", limit)
            return None
        except ray.exceptions.RayError as e:
            log.warning("a prebuild failed: %s", e)
            return None
        with self._stats_lock:
            self.stats["prebuild_compiles"] += out.compiled
        return ref

    def _run(self, req: EvalRequest) -> EvalResult:
        specs = self._specs(req.response)
        key = build_names(specs) if specs else ()
        shipped, owner = self._store.claim(key, self._wait_limit_s) if key else (None, False)
        published: Any = None
        try:
            if owner and self.ship == "prebuild":
                shipped = published = self._prebuilt(specs)
            result, built = self._execute(req, shipped, list(key) if owner and self.ship == "executor" else [])
            if built:
                published = self._ray.put(built)
                with self._stats_lock:
                    self.stats["shipped_sets"] += 1
        finally:
            if owner:
                self._store.publish(key, published)
        return result

    def _execute(self, req: EvalRequest, shipped: Any, collect: list[str]) -> tuple[EvalResult, list[Any]]:
        ray = self._ray
        result = EvalResult(
            Stage.INFRA_ERROR, task_id=req.task.id, backend=self.backend.name, policy=self.config.static_policy
        )
        built: list[Any] = []
        for attempt in range(1 + self.max_retries):
            actor = self._pool.take(self._wait_limit_s)
            if actor is None:
                return result.replace(messages=(f"no execution actor was free within {self._wait_limit_s:.0f} s",),
                                      extra={"pool_timeout": True}), []  # fmt: skip
            try:
                ref = actor.evaluate.remote(req.task, req.response, req.seed, shipped or [], collect)
                raw, built = ray.get(ref, timeout=self.request_timeout_s)
                result = EvalResult.from_dict(raw)
                self._pool.give(actor)
            except ray.exceptions.GetTimeoutError:
                log.warning("a request passed its %.0f s limit: its actor is replaced", self.request_timeout_s)
                self._pool.replace(actor)
                return result.replace(messages=(f"the request's {self.request_timeout_s:.0f} s time limit passed",),
                                      extra={"pool_timeout": True}), []  # fmt: skip
            except ray.exceptions.RayActorError as e:
                log.warning("execution actor died (attempt %d): %s", attempt + 1, e)
                self._pool.replace(actor)
                result = result.replace(messages=(f"execution actor died: {type(e).__name__}",))
                continue
            except ray.exceptions.RayError as e:  # e.g. a shipped object lost with its node: evaluate without it
                self._pool.give(actor)
                shipped, result = None, result.replace(messages=(f"ray error: {e}"[:500],))
                continue
            if result.stage is not Stage.INFRA_ERROR:
                break
        return result, built

    def submit(self, task: Task, response: str, seed: int = 0) -> Future[EvalResult]:
        """Queue one evaluation; blocks while ``2 * num_executors`` requests are in flight."""
        if self._closed:
            raise RuntimeError("RayEvaluator is closed")
        self._capacity.acquire()
        fut = self._threads.submit(self._run, EvalRequest(task, response, seed))
        fut.add_done_callback(lambda _: self._capacity.release())
        return fut

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        """Evaluate one response (same contract as ``LocalEvaluator.evaluate``)."""
        return self.submit(task, response, seed).result()

    def evaluate_many(self, requests: Iterable[EvalRequest | Sequence[Any]], progress: bool | None = None
                      ) -> list[EvalResult]:  # fmt: skip
        """Evaluate a batch; results in request order (progress shown like ``EvaluatorPool.evaluate_many``)."""
        reqs = [EvalRequest.coerce(r) for r in requests]
        show = len(reqs) >= PROGRESS_MIN_BATCH if progress is None else progress
        futures = []
        with Progress(len(reqs), "evaluating (ray)", enabled=show) as bar:
            for i, r in enumerate(reqs):
                label = f"{r.task.id}#{i}"  # named in the progress lines while it runs (or waits for an executor)
                bar.begin(label)
                fut = self.submit(r.task, r.response, r.seed)
                fut.add_done_callback(functools.partial(_finished, bar, label))
                futures.append(fut)
            return [f.result() for f in futures]

    def close(self) -> None:
        """Wait for running requests (each is time-bounded), then stop the actors (Ray itself stays up)."""
        if self._closed:
            return
        self._closed = True
        self._threads.shutdown(wait=True)
        self._pool.close()

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
