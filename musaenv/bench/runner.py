"""Evaluate many generations: through the pool (or Ray), resumable, identical responses once, progress shown.

Throughput comes from :class:`~musaenv.evaluator.pool.EvaluatorPool` (builds in parallel, runs one at a time per
device) or :class:`~musaenv.evaluator.ray_backend.RayEvaluator`. On top of it this module:

* evaluates each distinct (task, response) once and copies the result to its duplicates;
* lets a task's first sample run alone (other tasks' samples fill the pool meanwhile): when it gets as far as
  timing, it times the reference, which the evaluators cache per task and machine, so the task's other samples
  reuse that timing instead of timing it again side by side;
* writes each result as it arrives (:class:`~musaenv.bench.store.ResultStore`), so ``--resume`` continues a run
  that was interrupted;
* turns anything that escapes an evaluator into an ``infra_error`` row of that sample: a crash, timeout or killed
  worker costs one sample, never the run.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.bench.inputs import Sample
from musaenv.bench.store import ResultStore
from musaenv.config import EvalConfig
from musaenv.evaluator.progress import DEFAULT_INTERVAL_S, Progress
from musaenv.rewards import candidate_score
from musaenv.types import EvalResult, Stage

__all__ = ["BenchOptions", "RunStats", "make_evaluator", "run_bench"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchOptions:
    """How a bench run evaluates.

    Attributes:
        backend: Backend name (``auto``, ``cpu``, ``cuda``, ``triton``, ``musa``).
        config: :class:`~musaenv.config.EvalConfig` of every evaluation.
        workers: Builds at once in the pool (default: the pool's, one per core); with ``ray``, execution actors.
        ray: Evaluate on Ray (``ray.init()`` joins ``RAY_ADDRESS`` when set) instead of a local pool.
        seed: Evaluation seed of every sample (so duplicates are truly the same evaluation).
        limit: Evaluate at most this many of the samples still missing (``None``: all).
        resume: Continue the run already in the output folder.
        progress: Show progress (a bar on a terminal, log lines otherwise).
        progress_interval_s: Seconds between progress log lines when not on a terminal.
    """

    backend: str = "auto"
    config: EvalConfig = field(default_factory=EvalConfig)
    workers: int | None = None
    ray: bool = False
    seed: int = 0
    limit: int | None = None
    resume: bool = False
    progress: bool = True
    progress_interval_s: float = DEFAULT_INTERVAL_S

    def run_record(self) -> dict[str, Any]:
        """What decides the results (a resumed run must match it); saved as ``run.json``."""
        return {"backend": self.backend, "seed": self.seed, "config": self.config.to_dict()}


@dataclass(frozen=True)
class RunStats:
    """What one invocation did.

    Attributes:
        samples: Samples in the input.
        already_done: Samples whose final result was already in the folder (skipped).
        evaluated: Evaluations run now (one per distinct response).
        copied: Samples given the result of an identical response instead of an evaluation.
        left: Samples still missing because of ``limit``.
        seconds: Wall time of the evaluations.
    """

    samples: int
    already_done: int
    evaluated: int
    copied: int
    left: int
    seconds: float


def make_evaluator(options: BenchOptions) -> Any:
    """The pool (or Ray evaluator) that ``options`` ask for."""
    if options.ray:
        from musaenv.evaluator.ray_backend import RayEvaluator

        return RayEvaluator(options.backend, options.config, num_executors=options.workers or 1)
    from musaenv.evaluator.pool import EvaluatorPool

    return EvaluatorPool(options.backend, options.config, compile_workers=options.workers)


class _TaskQueue:
    """Jobs in input order, except that a task's later jobs wait while its first one is in flight."""

    def __init__(self, jobs: Sequence[list[Sample]], warm: set[str]) -> None:
        self._by_task: dict[str, deque[list[Sample]]] = {}
        for group in jobs:
            self._by_task.setdefault(group[0].task_key, deque()).append(group)
        self._warm = set(warm)  # tasks that had a sample finish: their reference timing is cached
        self._in_flight: Counter[str] = Counter()

    def __bool__(self) -> bool:
        return any(self._by_task.values())

    def take(self) -> list[Sample] | None:
        for key, queue in self._by_task.items():
            if queue and (key in self._warm or not self._in_flight[key]):
                self._in_flight[key] += 1
                return queue.popleft()
        return None

    def finished(self, key: str) -> None:
        self._in_flight[key] -= 1
        self._warm.add(key)


def _outcome(fut: Future[EvalResult], sample: Sample, backend: str) -> EvalResult:
    """The future's result; an exception escaping the evaluator becomes this sample's ``infra_error``."""
    try:
        return fut.result()
    except Exception as e:  # the evaluator's failure, never the candidate's: one sample lost, not the run
        log.exception("evaluation of %s sample %d failed", sample.task_key, sample.sample)
        return EvalResult(Stage.INFRA_ERROR, task_id=sample.task.id, backend=backend,
                          messages=(f"evaluator failed: {type(e).__name__}: {e}",))  # fmt: skip


def _evaluate(ev: Any, jobs: Sequence[list[Sample]], seed: int, warm: set[str], bar: Progress | None = None
              ) -> Iterator[tuple[list[Sample], EvalResult]]:  # fmt: skip
    """Yield ``(group, result)`` as evaluations finish, never more in flight than the evaluator holds; ``bar`` is
    told which samples are in flight (its lines name them)."""
    queue = _TaskQueue(jobs, warm)
    limit = max(1, int(getattr(ev, "max_in_flight", 1)))
    backend = str(getattr(getattr(ev, "backend", None), "name", ""))
    pending: dict[Future[EvalResult], list[Sample]] = {}
    while queue or pending:
        while len(pending) < limit and (group := queue.take()) is not None:
            pending[ev.submit(group[0].task, group[0].response, seed)] = group
            if bar is not None:
                bar.begin(_label(group[0]))
        if not pending:  # cannot happen (only a task with a job in flight is held back); never spin
            raise RuntimeError("bench scheduler: jobs left but none could start")
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for fut in done:
            group = pending.pop(fut)
            queue.finished(group[0].task_key)
            if bar is not None:
                bar.end(_label(group[0]))
            yield group, _outcome(fut, group[0], backend)


def _label(sample: Sample) -> str:
    return f"{sample.task_key}#{sample.sample}"


def result_row(sample: Sample, result: EvalResult, duplicate_of: int | None = None) -> dict[str, Any]:
    """One line of ``results.jsonl``: the input row's extra keys, the task, the sample, the result and its score."""
    row: dict[str, Any] = {**sample.extra, "task": sample.task_key, "sample": sample.sample}
    row.update(task_id=sample.task.id, level=sample.task.level, response_sha256=sample.digest)
    if duplicate_of is not None:
        row["duplicate_of"] = duplicate_of
    row.update(result=result.to_dict(), score=candidate_score(result))
    return row


def _plan(
    samples: Sequence[Sample], done: dict[tuple[str, int], dict[str, Any]], limit: int | None
) -> tuple[list[list[Sample]], list[tuple[Sample, dict[str, Any]]], int]:
    """(groups of identical responses to evaluate, samples answered by an earlier identical row, samples left)."""
    todo = [s for s in samples if s.key not in done]
    left = 0
    if limit is not None:
        todo, left = todo[:limit], max(0, len(todo) - limit)
    earlier = {row.get("response_sha256"): row for row in done.values()}
    groups: dict[str, list[Sample]] = {}
    reused = []
    for s in todo:
        if s.digest in earlier:
            reused.append((s, earlier[s.digest]))
        else:
            groups.setdefault(s.digest, []).append(s)
    return list(groups.values()), reused, left


def run_bench(samples: Sequence[Sample], out_dir: str | Path, options: BenchOptions, evaluator: Any = None) -> RunStats:
    """Evaluate the samples that ``out_dir`` lacks and append their rows to its ``results.jsonl``.

    Args:
        samples: From :func:`~musaenv.bench.inputs.load_generations`.
        out_dir: The run folder.
        options: :class:`BenchOptions`.
        evaluator: An evaluator with ``submit(task, response, seed) -> Future`` to use instead of
            :func:`make_evaluator`'s (it is not closed here).

    Raises:
        MusaEnvError: the folder holds results and ``options.resume`` is off, or they came from other options.
    """
    store = ResultStore(out_dir)
    done = store.open(options.run_record(), options.resume)
    jobs, reused, left = _plan(samples, done, options.limit)
    for s, row in reused:
        original = int(row.get("duplicate_of", row["sample"]))
        store.append(result_row(s, EvalResult.from_dict(row["result"]), duplicate_of=original))
    start = time.monotonic()
    total = sum(len(g) for g in jobs)
    copied = len(reused) + total - len(jobs)
    if jobs:
        owned = evaluator is None
        with contextlib.ExitStack() as stack:
            ev = stack.enter_context(make_evaluator(options)) if owned else evaluator
            bar = stack.enter_context(
                Progress(total, "bench", enabled=options.progress, interval_s=options.progress_interval_s)
            )
            for group, result in _evaluate(ev, jobs, options.seed, warm={k for k, _ in done}, bar=bar):
                for i, s in enumerate(group):
                    store.append(result_row(s, result, duplicate_of=group[0].sample if i else None))
                bar.update(result.stage.value, n=len(group))
    already = sum(1 for s in samples if s.key in done)
    return RunStats(len(samples), already, len(jobs), copied, left, time.monotonic() - start)
