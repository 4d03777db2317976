"""MooreEval on Ray: compile tasks on CPU nodes, execution actors pinned to devices, artifacts via the object store.

Per request:

1. **Prebuild** (a ``num_cpus=1`` task, any node): the candidate's ``load_inline`` calls are read statically
   (module-level string constants and literals; nothing of the candidate is executed) and built with
   :func:`~musaenv.backends.loader.build_extension` in that node's cache. The built ``.so`` files travel back as
   bytes through Ray's object store.
2. **Execute** (an actor holding a :class:`~musaenv.evaluator.local.LocalEvaluator`, one per device: ``num_gpus=1``
   for CUDA, a custom resource such as ``{"MUSA": 1}`` for Moore Threads cards, ``num_cpus=1`` otherwise): the
   shipped modules are installed into the actor node's cache under their content-hash names, then the candidate is
   evaluated as usual, so its builds are cache hits. A prebuild that guessed wrong only costs time: the names are
   content hashes, so a module can never stand in for different code, and the actor builds what it lacks itself.

The other way to share artifacts is a shared filesystem: point ``MUSAENV_CACHE_DIR`` on every node at the same
path (builds are atomic renames, so concurrent writers are safe) and pass ``prebuild=False``.

An actor that dies is replaced and its request retried; ``infra_error`` results are retried like in
:class:`~musaenv.evaluator.pool.EvaluatorPool`. Requires ``pip install 'musaenv[ray]'``.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import queue
import threading
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from musaenv.config import EvalConfig
from musaenv.errors import MusaEnvError
from musaenv.evaluator.pool import PROGRESS_MIN_BATCH, EvalRequest
from musaenv.tasks.task import Task
from musaenv.types import EvalResult, Stage

__all__ = ["RayEvaluator", "extract_build_specs", "install_artifacts"]

log = logging.getLogger(__name__)

_LOAD_KWARGS = ("name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
                "extra_cuda_cflags")  # positional order of torch's load_inline  # fmt: skip


def _constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level ``NAME = <literal>`` assignments (later ones win, like execution would)."""
    env: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = _value(node.value, env)
            except ValueError:
                env.pop(node.targets[0].id, None)
    return env


def _value(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ValueError(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, env) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_value(k, env): _value(v, env) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _value(node.left, env) + _value(node.right, env)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError(str(e)) from None


def extract_build_specs(code: str, backend: str) -> list[dict[str, Any]]:
    """Build specs of the ``load_inline(...)`` calls in ``code`` whose arguments are literals or module constants.

    Returns :class:`~musaenv.backends.loader.BuildSpec` dicts; calls it cannot read are skipped (never an error).
    """
    from musaenv.backends.loader import BuildSpec

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    env = _constants(tree)
    specs: list[dict[str, Any]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if (fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)) != "load_inline":
            continue
        try:
            kwargs = {k: _value(a, env) for k, a in zip(_LOAD_KWARGS, node.args)}
            kwargs.update({kw.arg: _value(kw.value, env) for kw in node.keywords if kw.arg})
            if "musa_sources" in kwargs:
                kwargs["cuda_sources"] = kwargs.pop("musa_sources")
            specs.append(BuildSpec.from_load_inline(kwargs, backend=backend).to_dict())
        except (ValueError, TypeError, KeyError):
            continue
    return specs


def install_artifacts(artifacts: Sequence[dict[str, Any]], root: Path | None = None) -> int:
    """Put shipped build results into the local extension cache (atomically); returns how many were new.

    Each artifact is ``{"name": ..., "so": bytes}`` for a built module or ``{"name": ..., "failed": text}`` for a
    deterministic compile error (the loader's ``failed.json``), so a known-bad candidate is not compiled again.
    """
    from musaenv.backends.loader import ext_cache_root

    root = root or ext_cache_root()
    added = 0
    for art in artifacts:
        name = str(art.get("name", ""))
        if not name.startswith("musaenv_") or "/" in name or (root / name / f"{name}.so").exists():
            continue
        data, fname = (art["so"], f"{name}.so") if art.get("so") else (art.get("failed"), "failed.json")
        if not data or (root / name / fname).exists():
            continue
        final = root / name / fname
        final.parent.mkdir(parents=True, exist_ok=True)
        part = final.with_name(f".{fname}.{uuid.uuid4().hex[:8]}")
        part.write_bytes(data if isinstance(data, bytes) else str(data).encode())
        os.replace(part, final)
        added += 1
    return added


def _prebuild(specs: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """Ray task body: build each spec here; return the modules' bytes (or the compile-error verdicts)."""
    from musaenv.backends.loader import BuildSpec, build_extension, ext_cache_root

    out: list[dict[str, Any]] = []
    for d in specs:
        res = build_extension(BuildSpec.from_dict(d), timeout_s=timeout_s)
        failed = ext_cache_root() / res.name / "failed.json"
        if res.ok and res.so_path:
            out.append({"name": res.name, "so": Path(res.so_path).read_bytes()})
        elif failed.exists():  # a deterministic verdict, not a timeout or an infra failure
            out.append({"name": res.name, "failed": failed.read_text()})
    return out


class _Executor:
    """Ray actor body: one LocalEvaluator on this actor's device."""

    def __init__(self, backend: str, config_json: str) -> None:
        from musaenv.evaluator.local import LocalEvaluator

        self.ev = LocalEvaluator(backend, EvalConfig.from_json(config_json))

    def info(self) -> dict[str, Any]:
        b = self.ev.backend
        return {"backend": b.name, "device": b.device, "tier": self.ev.tier, "compile_only": b.compile_only}

    def evaluate(self, task: Task, response: str, seed: int, artifacts: list[dict[str, Any]]) -> dict[str, Any]:
        install_artifacts(artifacts)
        return self.ev.evaluate(task, response, seed=seed).to_dict()

    def close(self) -> None:
        self.ev.close()


def _actor_options(backend: str, resources: dict[str, float] | None) -> dict[str, Any]:
    if resources is not None:
        return {"resources": dict(resources), "num_cpus": 1}
    if backend == "cuda":
        return {"num_gpus": 1, "num_cpus": 1}
    if backend == "musa":
        return {"resources": {"MUSA": 1}, "num_cpus": 1}
    return {"num_cpus": 1}


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MusaEnvError("RayEvaluator needs Ray: pip install 'musaenv[ray]'") from None
    return ray


class RayEvaluator:
    """The evaluator API (``evaluate``, ``submit``, ``evaluate_many``, ``close``) on a Ray cluster.

    Args:
        backend: Backend name, resolved on the execution actors' nodes (``auto`` picks their device).
        config: :class:`EvalConfig`.
        num_executors: Execution actors (one per device; each runs one candidate at a time).
        executor_resources: Ray resources of an actor instead of the backend's default (e.g. ``{"MUSA": 1}``).
        prebuild: Build statically readable ``load_inline`` calls in CPU tasks and ship the modules.
        max_retries: Extra attempts after an ``infra_error`` result or a dead actor.
        request_timeout_s: Wall-clock limit of one request's execution (``infra_error``, not retried, past it).
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
        init_kwargs: dict[str, Any] | None = None,
        executor_env: dict[str, str] | None = None,
    ) -> None:
        self._ray = ray = _import_ray()
        pkg_parent = str(Path(__file__).resolve().parents[2])
        self._runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in (pkg_parent, os.environ.get("PYTHONPATH", "")) if p)}}  # fmt: skip
        if not ray.is_initialized():
            ray.init(**{"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})})
        self.config = config or EvalConfig()
        self.prebuild, self.max_retries, self.request_timeout_s = prebuild, max_retries, request_timeout_s
        self._actor_cls = ray.remote(_Executor)
        self._prebuild_fn = ray.remote(num_cpus=1)(_prebuild).options(runtime_env=self._runtime_env)
        self._backend_name = backend
        actor_env = {"env_vars": {**self._runtime_env["env_vars"], **(executor_env or {})}}
        self._opts = {**_actor_options(backend, executor_resources), "runtime_env": actor_env}
        self._actors: queue.Queue[Any] = queue.Queue()
        for _ in range(num_executors):
            self._actors.put(self._new_actor())
        first = self._actors.get()
        info = ray.get(first.info.remote())
        self._actors.put(first)
        from musaenv.backends import BackendInfo

        self.backend = BackendInfo(info["backend"], info["device"], info["tier"], compile_only=info["compile_only"])
        self.tier = self.backend.tier if self.config.tier == "auto" else self.config.tier
        self.max_in_flight = 2 * num_executors  # one prebuilding while one executes, per actor
        self._capacity = threading.BoundedSemaphore(self.max_in_flight)
        self._threads = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="musaenv-ray")
        self._closed = False

    def _new_actor(self) -> Any:
        return self._actor_cls.options(**self._opts).remote(self._backend_name, self.config.to_json())

    def _artifacts(self, response: str) -> Any:
        from musaenv.tasks.parsing import extract_candidate

        if not self.prebuild:
            return []
        code = extract_candidate(response, self.config.max_response_chars).code
        specs = extract_build_specs(code, self.backend.name) if code else []
        if not specs:
            return []
        ref = self._prebuild_fn.remote(specs, self.config.compile_timeout_s)
        self._ray.wait([ref], num_returns=1)  # the device actor is taken only once its modules are built
        return ref

    def _run(self, req: EvalRequest) -> EvalResult:
        ray = self._ray
        artifacts: Any = self._artifacts(req.response)
        result = EvalResult(
            Stage.INFRA_ERROR, task_id=req.task.id, backend=self.backend.name, policy=self.config.static_policy
        )
        for attempt in range(1 + self.max_retries):
            actor = self._actors.get()
            try:
                ref = actor.evaluate.remote(req.task, req.response, req.seed, artifacts)
                result = EvalResult.from_dict(ray.get(ref, timeout=self.request_timeout_s))
                self._actors.put(actor)
            except ray.exceptions.GetTimeoutError:
                self._actors.put(actor)  # it finishes the request in the background, then serves the next
                return result.replace(messages=("the request's time limit passed",), extra={"pool_timeout": True})
            except ray.exceptions.RayActorError as e:
                log.warning("execution actor died (attempt %d): %s", attempt + 1, e)
                self._actors.put(self._new_actor())
                result = result.replace(messages=(f"execution actor died: {type(e).__name__}",))
                continue
            except ray.exceptions.RayTaskError as e:  # the prebuild task failed: evaluate without its modules
                self._actors.put(actor)
                artifacts, result = [], result.replace(messages=(f"prebuild failed: {e}"[:500],))
                continue
            if result.stage is not Stage.INFRA_ERROR:
                break
        return result

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
        """Evaluate a batch; results in request order."""
        from tqdm.auto import tqdm

        reqs = [EvalRequest.coerce(r) for r in requests]
        show = len(reqs) >= PROGRESS_MIN_BATCH if progress is None else progress
        futures = []
        with tqdm(total=len(reqs), desc="evaluating (ray)", unit="cand", disable=not show or None) as bar:
            for r in reqs:
                fut = self.submit(r.task, r.response, r.seed)
                fut.add_done_callback(lambda _: bar.update(1))
                futures.append(fut)
            return [f.result() for f in futures]

    def close(self) -> None:
        """Wait for running requests, then stop the actors (Ray itself stays up)."""
        if self._closed:
            return
        self._closed = True
        self._threads.shutdown(wait=True)
        while not self._actors.empty():
            actor = self._actors.get()
            with contextlib.suppress(Exception):  # a dead actor has nothing left to close
                self._ray.get(actor.close.remote(), timeout=60)
            self._ray.kill(actor)

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
