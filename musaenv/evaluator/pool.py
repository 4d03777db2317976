"""MooreEval-style pools: compilation (CPU-bound) and execution (device-bound) scaled independently.

An :class:`EvaluatorPool` runs up to ``compile_workers + len(devices)`` evaluations at once, each in a
:class:`~musaenv.evaluator.local.LocalEvaluator` of its own (own worker processes, reference worker and spare).
Two bounds decouple the stages:

* **compile slots**: at most ``compile_workers`` builds run at once in this process (a semaphore in
  :mod:`musaenv.toolchains.loader`; cache hits never wait for one);
* **device slots**: one lock per device, held from a candidate's first trial to the end of its reference run, so
  runs and timings on one device never overlap while other requests compile.

Requests beyond the in-flight bound wait in :meth:`EvaluatorPool.submit` (back-pressure). Results whose stage is
``infra_error`` are retried on a fresh evaluator; everything else is final. Every request gets a result: an
exception escaping an evaluator becomes an ``infra_error`` result, never a lost request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from musaenv.backends import REGISTRY, BackendInfo, resolve_backend
from musaenv.config import EvalConfig
from musaenv.errors import ConfigError
from musaenv.evaluator.interrupt import interrupted, kill_running
from musaenv.evaluator.progress import Progress
from musaenv.isolation.limits import backstop_s
from musaenv.tasks.task import Task
from musaenv.toolchains.loader import configure_builds, default_build_parallelism
from musaenv.types import EvalResult, Stage

__all__ = ["EvalRequest", "EvaluatorPool", "evaluate_many", "request_backstop_s"]

log = logging.getLogger(__name__)

PROGRESS_MIN_BATCH = 8  # batches at least this long show a progress bar (when stderr is a terminal)


#: Start-ups (fork server, workers), the reference's warm-up, the comparison and queueing for a build slot on top of
#: the stage limits' own backstops.
REQUEST_MARGIN_S = 120.0


def request_backstop_s(config: EvalConfig) -> float:
    """The wall-clock backstop of one request under ``config``.

    The sum of the backstops (:func:`musaenv.isolation.limits.backstop_s`) of every limit a request can use up in
    turn: two builds (the candidate's, and one it may wait for), loading, and the trials and timing of the candidate
    and of the reference, plus :data:`REQUEST_MARGIN_S`. Every stage ends itself at its own limit (in CPU seconds or
    own time) or, on a stalled host, at its own backstop as ``infra_error``; so this one fires only when the harness
    itself hangs, never because the host is busy.
    """
    c = config
    limits = (c.compile_timeout_s, c.compile_timeout_s, c.load_timeout_s, c.run_timeout_s, c.timing_timeout_s)
    return sum(map(backstop_s, (*limits, c.run_timeout_s, c.timing_timeout_s))) + REQUEST_MARGIN_S


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation: a response on a task with a seed (tuples ``(task, response[, seed])`` are accepted too)."""

    task: Task
    response: str
    seed: int = 0

    @classmethod
    def coerce(cls, item: EvalRequest | Sequence[Any]) -> EvalRequest:
        """Accept an :class:`EvalRequest` or a ``(task, response[, seed])`` tuple."""
        if isinstance(item, EvalRequest):
            return item
        return cls(item[0], item[1], int(item[2]) if len(item) > 2 else 0)


def _device_env(device: str) -> dict[str, str]:
    """Pin candidate workers of ``cuda:N`` / ``musa:N`` slots to that card."""
    kind, _, index = device.partition(":")
    if not index:
        return {}
    var = next((b.visible_devices for b in REGISTRY.values() if b.device == kind and b.visible_devices), "")
    return {var: index} if var else {}


def _local_evaluator(backend: BackendInfo, config: EvalConfig, device_slot: Any, worker_env: dict[str, str]) -> Any:
    from musaenv.evaluator.local import LocalEvaluator

    return LocalEvaluator(backend, config, device_slot=device_slot, worker_env=worker_env)


class EvaluatorPool:
    """Evaluate many candidates concurrently with bounded compile and device concurrency.

    Same :meth:`evaluate` API as :class:`~musaenv.evaluator.local.LocalEvaluator` (so an env can use it), plus
    :meth:`submit` (a future, blocking while the pool is full) and :meth:`evaluate_many` (a batch, in order).

    Args:
        backend: Backend name or :class:`BackendInfo`.
        config: :class:`EvalConfig` for every evaluation.
        compile_workers: Builds at once (default: one per core, fewer when memory is short). This sets the
            process-wide bound of :func:`~musaenv.toolchains.loader.configure_builds` (the last pool created wins).
        devices: Device slot names, one lock each, e.g. ``["cuda:0", "cuda:1"]`` (``cuda:N`` pins candidate
            workers with ``CUDA_VISIBLE_DEVICES``). Default: one slot for the backend's device.
        max_in_flight: Requests evaluated at once (default ``compile_workers + len(devices)``).
        request_timeout_s: Wall-clock backstop per request (queueing excluded); past it the request gets an
            ``infra_error`` result marked ``pool_timeout`` (not retried) while its evaluator finishes in the background.
            ``None`` (default): :func:`request_backstop_s` of ``config``, which an honest evaluation never reaches
            however loaded the host (each stage ends itself first). A smaller value is a wall-clock cap of the
            caller's choosing: a busy host can turn an honest evaluation into that ``infra_error``.
        max_retries: Extra attempts for requests whose result is ``infra_error``.
        retry_backoff_s: Wait before the first retry, doubled before each next one (at most 60 s): a host short of
            memory or disk (a compiler the OOM killer took) gets time to recover instead of failing again at once.
        evaluator_factory: ``(backend, config, device_slot, worker_env) -> evaluator`` building the per-request
            evaluators (default :class:`~musaenv.evaluator.local.LocalEvaluator`); tests inject doubles here.
    """

    def __init__(
        self,
        backend: str | BackendInfo = "auto",
        config: EvalConfig | None = None,
        compile_workers: int | None = None,
        devices: Sequence[str] | None = None,
        max_in_flight: int | None = None,
        request_timeout_s: float | None = None,
        max_retries: int = 1,
        evaluator_factory: Callable[..., Any] | None = None,
        retry_backoff_s: float = 2.0,
    ) -> None:
        self.backend = backend if isinstance(backend, BackendInfo) else resolve_backend(backend)
        self.config = config or EvalConfig()
        self.tier = self.backend.tier if self.config.tier == "auto" else self.config.tier
        self.compile_workers = compile_workers or default_build_parallelism()
        self.devices = list(devices or [self.backend.device])
        self.max_in_flight = max_in_flight or self.compile_workers + len(self.devices)
        derived = request_backstop_s(self.config)
        self.request_timeout_s: float | None = derived if request_timeout_s is None else request_timeout_s
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self._factory = evaluator_factory or _local_evaluator
        configure_builds(max_parallel=self.compile_workers)
        self._slots = {d: threading.Lock() for d in self.devices}
        self._free: list[Any] = []  # idle LocalEvaluators
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self._next_device = 0
        self._capacity = threading.BoundedSemaphore(self.max_in_flight)
        self._executor = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="musaenv-eval")
        self._shut, self._running = False, 0
        self._closed = False
        self._usage_errors: set[str] = set()  # usage problems already logged (each once)

    def _new_evaluator(self) -> Any:
        with self._lock:
            device = self.devices[self._next_device % len(self.devices)]
            self._next_device += 1
        ev = self._factory(self.backend, self.config, self._slots[device], _device_env(device))
        with self._lock:
            self._all.append(ev)
        return ev

    def _take(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._new_evaluator()

    def _give_back(self, ev: Any, healthy: bool) -> None:
        if healthy and not self._closed:
            with self._lock:
                self._free.append(ev)
            return
        ev.close()
        with self._lock:
            if ev in self._all:
                self._all.remove(ev)

    def _attempt(self, req: EvalRequest) -> EvalResult:
        ev = self._take()
        healthy = False
        try:
            result: EvalResult = ev.evaluate(req.task, req.response, seed=req.seed)
            healthy = result.stage is not Stage.INFRA_ERROR
            return result
        except ConfigError as e:  # a usage problem (a tier that cannot fit): said once, never a traceback per sample
            healthy = True  # the evaluator is fine; the request is not
            with self._lock:
                first = str(e) not in self._usage_errors
                self._usage_errors.add(str(e))
            if first:
                log.error("%s", e)
            return EvalResult(Stage.INFRA_ERROR, task_id=req.task.id, backend=self.backend.name, flags=("usage_error",),
                              messages=(str(e),), policy=self.config.static_policy)  # fmt: skip
        except Exception as e:  # a harness bug or a dead process: the request still gets a result
            log.exception("evaluator failed on %s", req.task.id)
            return EvalResult(Stage.INFRA_ERROR, task_id=req.task.id, backend=self.backend.name,
                              messages=(f"evaluator failed: {type(e).__name__}: {e}",),
                              policy=self.config.static_policy)  # fmt: skip
        finally:
            self._give_back(ev, healthy)

    def _run(self, req: EvalRequest) -> EvalResult:
        with self._lock:
            self._running += 1
        try:
            return self._run_counted(req)
        finally:
            with self._lock:
                self._running -= 1

    def _run_counted(self, req: EvalRequest) -> EvalResult:
        result = self._attempt(req)
        retries = 0
        while (
            result.stage is Stage.INFRA_ERROR
            and "usage_error" not in result.flags  # the same settings fail the same way
            and retries < self.max_retries
            and not self._closed
        ):
            retries += 1
            wait_s = min(60.0, self.retry_backoff_s * 2 ** (retries - 1))
            log.warning("infra_error on %s, retry %d in %.0f s: %s", req.task.id, retries, wait_s, result.messages[:1])
            time.sleep(wait_s)
            result = self._attempt(req)
        return result.replace(extra={**result.extra, "retries": retries}) if retries else result

    def submit(self, task: Task, response: str, seed: int = 0) -> Future[EvalResult]:
        """Queue one evaluation; blocks while ``max_in_flight`` requests are running (back-pressure)."""
        if self._closed:
            raise RuntimeError("EvaluatorPool is closed")
        self._capacity.acquire()
        req = EvalRequest(task, response, seed)
        try:
            fut = self._executor.submit(self._run, req)
        except BaseException:
            self._capacity.release()
            raise
        fut.add_done_callback(lambda _: self._capacity.release())
        return fut

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        """Evaluate one response (thread-safe; same contract as ``LocalEvaluator.evaluate``)."""
        return self._collect(self.submit(task, response, seed), EvalRequest(task, response, seed), time.monotonic())

    def _collect(self, fut: Future[EvalResult], req: EvalRequest, started: float) -> EvalResult:
        if self.request_timeout_s is None:
            return fut.result()
        remaining = self.request_timeout_s - (time.monotonic() - started)
        done, _ = wait([fut], timeout=max(remaining, 0.0))
        if done:
            return fut.result()
        return EvalResult(Stage.INFRA_ERROR, task_id=req.task.id, backend=self.backend.name,
                          messages=(f"the pool's {self.request_timeout_s:.0f} s request limit passed",),
                          extra={"pool_timeout": True}, policy=self.config.static_policy)  # fmt: skip

    def imap(
        self, requests: Iterable[EvalRequest | Sequence[Any]], bar: Progress | None = None
    ) -> Iterator[tuple[int, EvalResult]]:
        """Yield ``(index, result)`` as evaluations finish, submitting lazily (never more than the pool holds);
        ``bar`` is told which requests are in flight (``<task id>#<index>``: its lines name them)."""
        pending: dict[Future[EvalResult], tuple[int, EvalRequest, float]] = {}
        source = enumerate(EvalRequest.coerce(r) for r in requests)
        exhausted = False
        while pending or not exhausted:
            while not exhausted and len(pending) < self.max_in_flight:
                item = next(source, None)
                if item is None:
                    exhausted = True
                    break
                i, req = item
                pending[self.submit(req.task, req.response, req.seed)] = (i, req, time.monotonic())
                if bar is not None:
                    bar.begin(f"{req.task.id}#{i}")
            if not pending:
                break
            done, _ = wait(list(pending), timeout=self._poll_s(pending), return_when=FIRST_COMPLETED)
            for fut in list(pending):
                i, req, started = pending[fut]
                overdue = self.request_timeout_s is not None and time.monotonic() - started >= self.request_timeout_s
                if fut in done or overdue:
                    del pending[fut]
                    if bar is not None:
                        bar.end(f"{req.task.id}#{i}")
                    yield i, self._collect(fut, req, started)

    def _poll_s(self, pending: dict[Future[EvalResult], tuple[int, EvalRequest, float]]) -> float | None:
        if self.request_timeout_s is None:
            return None
        first = min(started for _, _, started in pending.values())
        return max(0.0, self.request_timeout_s - (time.monotonic() - first)) + 0.01

    def evaluate_many(
        self, requests: Iterable[EvalRequest | Sequence[Any]], progress: bool | None = None
    ) -> list[EvalResult]:
        """Evaluate a batch; results in request order.

        ``progress``: a bar on a terminal, periodic log lines otherwise (:class:`~musaenv.evaluator.progress.Progress`);
        default: batches of 8 or more.
        """
        reqs = [EvalRequest.coerce(r) for r in requests]
        show = len(reqs) >= PROGRESS_MIN_BATCH if progress is None else progress
        results: list[EvalResult | None] = [None] * len(reqs)
        with Progress(len(reqs), "evaluating", enabled=show) as bar:
            for i, result in self.imap(reqs, bar):
                results[i] = result
                bar.update(result.stage.value)
        return [r for r in results if r is not None]

    def close(self) -> None:
        """Wait for running evaluations, then stop every worker (idempotent). Called while a ``KeyboardInterrupt``
        or ``SystemExit`` propagates (Ctrl-C in a ``with`` block or ``finally``), it stops them instead: see
        :meth:`abort`."""
        aborted = interrupted()
        if aborted:
            self.abort()
        if self._shut:
            return
        self._closed = self._shut = True
        self._executor.shutdown(wait=not aborted)
        with self._lock:
            evaluators, self._all, self._free = list(self._all), [], []
        for ev in evaluators:
            ev.close()

    def abort(self, timeout_s: float = 10.0) -> None:
        """Stop now: queued requests are cancelled and running ones end within seconds, their workers and builders
        killed (:func:`musaenv.evaluator.interrupt.kill_running`); then every evaluator is closed."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout_s
        while self._running and time.monotonic() < deadline:
            kill_running()  # again each round: an evaluation may start a reference worker or a spare meanwhile
            time.sleep(0.05)
        if self._running:
            log.warning("%d evaluations still running %.0f s after the interrupt", self._running, timeout_s)

    def __enter__(self) -> EvaluatorPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def evaluate_many(
    requests: Iterable[EvalRequest | Sequence[Any]],
    backend: str | BackendInfo = "auto",
    config: EvalConfig | None = None,
    compile_workers: int | None = None,
    devices: Sequence[str] | None = None,
    **pool_kwargs: Any,
) -> list[EvalResult]:
    """One-shot batch evaluation through a temporary :class:`EvaluatorPool` (results in request order)."""
    with EvaluatorPool(backend, config, compile_workers=compile_workers, devices=devices, **pool_kwargs) as pool:
        return pool.evaluate_many(requests)
