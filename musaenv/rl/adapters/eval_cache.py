"""An evaluation cache in front of a real evaluator: each (task, response, seed bucket) is evaluated once.

Training a small policy over a fixed pool of programs (:mod:`musaenv.rl.adapters.sb3`) needs thousands of episodes;
a real evaluation costs seconds (a worker process, correctness trials, timing). :class:`CachingEvaluator` makes
the real evaluator run once per distinct (task, response, seed bucket) and replays the recorded
:class:`~musaenv.types.EvalResult` afterwards, so the env's episode logic (stop on success, shaping, feedback) stays
the real one while training takes minutes.

The env draws a fresh evaluation seed per step; ``seeds=n`` folds it into ``n`` buckets (``seed % n``) and evaluates
the response with the bucket as its seed, so ``n`` is the number of distinct real runs per response (``n = 1``:
one run; a larger ``n`` keeps some of the run-to-run spread of timings). ``infra_error`` results (the harness's
fault) are never cached. With ``path`` the cache is a JSON file, reloaded by later processes; its key covers the
task's source and shapes, the response text, the bucket, the backend and the evaluator's config, so an edited task
or a changed config is evaluated afresh. Concurrent writers are not coordinated: the last one wins, and a lost entry
only costs one more evaluation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from musaenv.env import Evaluator
from musaenv.errors import ConfigError
from musaenv.tasks.task import Task
from musaenv.types import EvalResult, Stage

__all__ = ["CachingEvaluator"]

log = logging.getLogger(__name__)


def _fingerprint(evaluator: Evaluator) -> str:
    """What of the inner evaluator decides a verdict: its backend name and its config, as text."""
    backend = getattr(getattr(evaluator, "backend", None), "name", "")
    config = getattr(evaluator, "config", None)
    to_json = getattr(config, "to_json", None)
    config_text = to_json() if callable(to_json) else repr(config)
    return f"{type(evaluator).__name__}|{backend}|{evaluator.tier}|{config_text}"


class CachingEvaluator:
    """Evaluate each (task, response, seed bucket) once with ``inner``; replay the result afterwards.

    Satisfies the env's evaluator protocol: ``gym.make("KernelGen-v0", evaluator=CachingEvaluator(ev))``.

    Args:
        inner: The real evaluator (e.g. :class:`~musaenv.evaluator.local.LocalEvaluator`).
        seeds: Seed buckets per response (``seed % seeds``); ``None`` keys on the exact seed.
        path: JSON file to load the cache from and save it to after every new result; ``None`` keeps it in memory.
        close_inner: Whether :meth:`close` also closes ``inner``.

    Attributes:
        hits: Evaluations answered from the cache.
        misses: Evaluations that ran ``inner``.
    """

    def __init__(
        self,
        inner: Evaluator,
        seeds: int | None = 1,
        path: str | Path | None = None,
        *,
        close_inner: bool = True,
    ) -> None:
        if seeds is not None and (not isinstance(seeds, int) or seeds < 1):
            raise ConfigError(f"CachingEvaluator: expected seeds an int >= 1 or None, found {seeds!r}")
        self.inner = inner
        self.tier = inner.tier  # the env's evaluator protocol: the size tier (``cpu`` or ``gpu``)
        self.seeds = seeds
        self.path = None if path is None else Path(path)
        self.close_inner = close_inner
        self.hits = 0
        self.misses = 0
        self._fingerprint = _fingerprint(inner)
        self._store: dict[str, dict[str, Any]] = self._load()

    @property
    def backend(self) -> Any:
        """The inner evaluator's backend record (the env reads its ``name``)."""
        return getattr(self.inner, "backend", None)

    def __len__(self) -> int:
        return len(self._store)

    def _load(self) -> dict[str, dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as e:
            log.warning("evaluation cache %s unreadable (%s); starting empty", self.path, e)
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Write a temporary file and rename it: a reader never sees a half-written cache.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(self._store, f)
        os.replace(tmp, self.path)

    def bucket(self, seed: int) -> int:
        """The seed a response is really evaluated with when the env asks for ``seed``."""
        return int(seed) if self.seeds is None else int(seed) % self.seeds

    def key(self, task: Task, response: str, seed: int) -> str:
        """Cache key of ``response`` on ``task`` for the env's evaluation ``seed``."""
        h = hashlib.sha256()
        for part in (task.id, task.source_hash, self._fingerprint, str(self.bucket(seed)), response):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        """The recorded result of ``response`` for this seed bucket, evaluating it first if it was never seen."""
        if not isinstance(response, str):
            return self.inner.evaluate(task, response, seed=seed)  # not cacheable text: judged by the evaluator
        key = self.key(task, response, seed)
        cached = self._store.get(key)
        if cached is not None:
            self.hits += 1
            return EvalResult.from_dict(cached)
        self.misses += 1
        result = self.inner.evaluate(task, response, seed=self.bucket(seed))
        if result.stage is not Stage.INFRA_ERROR:
            self._store[key] = result.to_dict()
            self._save()
        return result

    def close(self) -> None:
        """Close the inner evaluator when ``close_inner`` is set."""
        if self.close_inner:
            self.inner.close()
