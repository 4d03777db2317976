"""The default evaluator: candidates in fresh sandboxed worker processes, references in a clean one.

Size: LocalEvaluator's stages as one orchestrator (plan, tier choice, reference, candidate, binary policy, verdict);
tier and memory planning is the next piece to move out.
"""
# Kept whole (~410 lines): one class whose methods are the step's stages in order (docs/architecture.md);
# split, the list a reader follows would be in two files.

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any

from musaenv import _env
from musaenv.backends import BackendInfo, get_backend, resolve_backend
from musaenv.config import EvalConfig
from musaenv.errors import ConfigError
from musaenv.evaluator.candidate import CandidateRun, drive_candidate
from musaenv.evaluator.memory import MemoryBudget, candidate_budget_mb, status_mb
from musaenv.evaluator.pairing import Pairer
from musaenv.evaluator.plan import EvalPlan, interpreted_config, interpreter_shapes, make_plan, plan_pool
from musaenv.evaluator.reference import ReferenceError_, ReferenceService, RefOutputs
from musaenv.evaluator.verdict import judge, unconditioned_misses
from musaenv.isolation import forkserver
from musaenv.isolation.forkserver import ForkServer
from musaenv.isolation.messages import CandidateRequest
from musaenv.isolation.plans import TimingPlan
from musaenv.isolation.process import WorkerProcess, allocator_env
from musaenv.isolation.process import worker_env as process_env
from musaenv.tasks.external import check_memory
from musaenv.tasks.parsing import extract_candidate
from musaenv.tasks.task import Task
from musaenv.timing.method import timing_method
from musaenv.toolchains.admission import admitted, run_need_mb
from musaenv.toolchains.loader import sweep_stale_builds
from musaenv.types import EvalResult, Stage
from musaenv.verification.runtime import RuntimeSettings

__all__ = ["LocalEvaluator"]

log = logging.getLogger(__name__)

WORKER_START_TIMEOUT_S = 180.0


class _Early(Exception):
    """A stage of :meth:`LocalEvaluator.evaluate` settled the verdict before the last stage."""

    def __init__(self, result: EvalResult) -> None:
        super().__init__(result.stage.value)
        self.result = result


def _checked_calls(plan: EvalPlan, run: CandidateRun, probes: int) -> tuple[list[int], list[int]]:
    """Timed calls to recheck in full (the plan's, plus the last one that ran) and to probe by fingerprint.

    Both depend on how many calls ran, known only now; the probes come from a seed the worker never saw.
    """
    samples = run.timing[0].samples_ms if run.timing is not None else None
    if not samples:
        return list(plan.keep), []
    kept = sorted({*plan.keep, len(samples) - 1})
    return kept, plan.probe_calls(len(samples), kept, probes)


def _add_rechecks(ref: RefOutputs, kept: list[int], have: dict[int, list[Any]]) -> None:
    """Complete ``ref``'s rechecks of the timed calls ``kept`` with the outputs the reference sent while paired
    (``have``: the eager reference on the same inputs, so the same values a second run of those calls would give;
    the reference ran only the calls missing from it). In ``kept``'s order, in place."""
    if not have:
        return
    ran = dict(zip(ref.recheck_calls, ref.rechecks))
    ref.rechecks = [ran[k] if k in ran else (have[k], [str(a.dtype) for a in have[k]]) for k in kept]
    ref.recheck_calls = list(kept)


class LocalEvaluator:
    """Evaluate candidates on this machine.

    Each candidate runs in a fresh worker process (started ahead of time, so its start-up is hidden) that is
    killed with everything it started when the evaluation ends. Workers are forked from a fork server that has
    imported torch once (:mod:`musaenv.isolation.forkserver`; ``EvalConfig.fork_server=False`` starts a fresh
    interpreter per worker instead). Builds go through the content-addressed
    cache of :mod:`musaenv.toolchains.loader`. Reference outputs come from a separate, long-lived worker.

    Args:
        backend: Backend name or a resolved :class:`BackendInfo`.
        config: :class:`EvalConfig`.
        device_slot: A lock (any context manager) held while the candidate's trials and timing and the reference
            run use the device, so evaluators sharing it never run on it at once (their builds still overlap). On
            the CPU only timed work takes it: the candidate's timing and a reference run that is timed.
            ``None``: no coordination (a lone evaluator). :class:`~musaenv.evaluator.pool.EvaluatorPool` passes one.
        worker_env: Extra environment variables of candidate workers (e.g. ``CUDA_VISIBLE_DEVICES``).
    """

    def __init__(
        self,
        backend: str | BackendInfo = "auto",
        config: EvalConfig | None = None,
        device_slot: AbstractContextManager[Any] | None = None,
        worker_env: dict[str, str] | None = None,
    ) -> None:
        self.backend = backend if isinstance(backend, BackendInfo) else resolve_backend(backend)
        self.config = config or EvalConfig()
        self.tier = self.backend.tier if self.config.tier == "auto" else self.config.tier
        threads = self.config.timing.cpu_threads
        # device pins and the allocator's settings: the reference worker gets them too
        device_env = {**allocator_env(self.config.timing.allocator), **(worker_env or {})}
        # Triton without a GPU runs kernels in its interpreter, which must be chosen before triton is imported.
        interpret = get_backend(self.backend.name).cpu_interpreter and self.backend.device == "cpu"
        self._interpreted = interpret
        if interpret:  # judged on correctness there, with room for interpreted grids (docs/backends.md)
            self.config = interpreted_config(self.config)
        self._worker_env = {"TRITON_INTERPRET": "1", **device_env} if interpret else device_env
        self._server: ForkServer | None = None
        ref_server = None
        if self.config.fork_server:
            self._server = forkserver.acquire(process_env(threads, self._worker_env))
            ref_server = forkserver.acquire(process_env(threads, device_env))  # the same one unless Triton-CPU
        self._reference = ReferenceService(
            self.backend.device, threads, self.config.timing, _env.cache_dir(), ref_server, device_env
        )
        self._spare: WorkerProcess | None = None
        self._device_slot = device_slot
        self._memory: MemoryBudget | None = None  # the last candidate's memory budget (reported with its result)
        self._broken_tasks: dict[str, str] = {}  # task source hash -> why its reference cannot run (refused once)
        self._closed = False
        sweep_stale_builds()

    def _new_worker(self) -> WorkerProcess:
        if self._server is not None:  # it died (or was killed): start another
            self._server = forkserver.renew(self._server)
        return WorkerProcess("candidate", self.config.timing.cpu_threads, self._worker_env, self._server)

    def _take_worker(self) -> WorkerProcess:
        worker = self._spare or self._new_worker()
        server_gone = self._server is not None and not self._server.alive  # its workers die with it (death signal)
        if self._spare is not None and (
            server_gone or not worker.wait_ready(WORKER_START_TIMEOUT_S) or worker.poll() is not None
        ):
            worker.close()  # the spare died while waiting (killed, or with its fork server): one fresh try
            worker = self._new_worker()
        self._spare = None
        if not worker.wait_ready(WORKER_START_TIMEOUT_S):
            why = worker.start_error or worker.log_tail()
            worker.close()
            raise RuntimeError(f"candidate worker did not start: {why}")
        # Start the next worker now: its start-up overlaps this evaluation.
        self._spare = self._new_worker()
        return worker

    def _timing_request(self, plan: EvalPlan) -> TimingPlan | None:
        t = self.config.timing
        if not t.enabled:
            return None
        flush = t.flush_bytes
        if flush is None:
            flush = (32 if self.backend.device == "cpu" else 256) * 1024 * 1024
        return TimingPlan(  # the config validates ranges, not types: a JSON config may say 3.0 where 3 is meant
            seed=plan.timing_seed,
            pool=plan.timing_pool,
            keep=list(plan.keep),
            warmup=int(t.warmup),
            repeats=int(t.repeats),
            max_time_s=float(t.max_time_s),
            min_pairs=int(t.min_pairs),
            stop_width=float(t.stop_width),
            flush_bytes=int(flush) if t.flush_cache else 0,
            baseline=t.baseline,
            paired=timing_method(t.reference).gated and not self.backend.compile_only,
        )

    def _request(self, task: Task, source: str, plan: EvalPlan, worker: WorkerProcess) -> CandidateRequest:
        t = self.config.timing
        return CandidateRequest(
            task_source=task.source,
            candidate=source,
            device=self.backend.device,
            backend=self.backend.name,
            compile_only=self.backend.compile_only,
            shapes=[dict(s) for s in plan.shapes],
            init_seed=plan.init_seed,
            trials=plan.trial_specs(),
            timing=self._timing_request(plan),
            cpu_threads=t.cpu_threads,
            allow_processes=get_backend(self.backend.name).jit_processes and self.backend.device != "cpu",
            workdir=str(worker.workdir),
            sandbox=self.config.sandbox.replace(address_space_mb=self._memory_budget_mb(task, worker)),
            runtime=RuntimeSettings.from_config(self.config).to_request(*self._tolerances(task)),
        )

    def _memory_budget_mb(self, task: Task, worker: WorkerProcess) -> int:
        """The candidate's address-space limit, from its task's reference peak (:mod:`musaenv.evaluator.memory`).

        None (0) for a worker that creates a CUDA/MUSA context: the driver reserves address space far beyond its use;
        the device allocator bounds it instead (:mod:`musaenv.isolation.gpu_plan`)."""
        sb = self.config.sandbox
        if self.backend.device != "cpu":
            return 0
        peak = self._reference.task_peaks.get(task.source_hash)
        budget = candidate_budget_mb(peak, status_mb(worker.pid, "VmSize"), sb.memory_factor, sb.memory_headroom_mb,
                                     sb.address_space_mb)  # fmt: skip
        self._memory = MemoryBudget(budget, None if peak is None else round(peak, 1))
        return budget

    def _run_admission(self, task: Task) -> AbstractContextManager[float]:
        """A machine-wide run slot admitted by the memory this task's workers need (:mod:`musaenv.toolchains.admission`:
        two workers' footprint plus the reference's measured peak); taken before the device slot, never inside it."""
        need = run_need_mb(self._reference.task_peaks.get(task.source_hash))
        return admitted("worker", task.id, need_mb=need, family="run")

    def _memory_note(self, result: EvalResult) -> EvalResult:
        """Say plainly when a candidate that failed at run time was out of its memory budget."""
        memory, self._memory = self._memory, None
        if memory is None:
            return result
        result = result.replace(extra={**result.extra, "memory": dataclasses.asdict(memory)})
        log_text = result.runtime_log or ""
        if result.stage is Stage.RUNTIME_ERROR and any(m in log_text for m in ("MemoryError", "bad_alloc")):
            why = f"out of memory: the candidate's address space is limited to {memory.address_space_mb} MB"
            if memory.reference_peak_mb is not None:
                why += f" (its reference's peak {memory.reference_peak_mb} MB x {self.config.sandbox.memory_factor}"
                why += " + headroom; SandboxConfig.memory_factor)"
            result = result.replace(messages=(*result.messages, why))
        return result

    def _tolerances(self, task: Task) -> tuple[float, float]:
        atol = self.config.atol if self.config.atol is not None else task.atol
        rtol = self.config.rtol if self.config.rtol is not None else task.rtol
        return atol, rtol

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        """Evaluate one response (raw LLM text or plain code) on ``task``. Never raises for a bad candidate."""
        start = time.perf_counter()
        result = self._evaluate(task, response, seed).replace(policy=self.config.static_policy)
        if result.stage is Stage.FORMAT_ERROR and not result.extra:
            return result  # refused before any process ran: no timing, so repeated calls give equal records
        return result.replace(eval_time_s=time.perf_counter() - start)

    def _evaluate(self, task: Task, response: str, seed: int) -> EvalResult:
        """One step, stage by stage (docs/architecture.md); a stage that settles the verdict raises :class:`_Early`."""
        base = EvalResult(stage=Stage.FORMAT_ERROR, task_id=task.id, backend=self.backend.name)
        plan: EvalPlan | None = None
        try:
            code = self._parse(response, base)
            static = self._static_checks(code, base)
            plan, timing = self._plan(task, seed, base)
            run = self._run_in_worker(task, code, plan, base)
            if run.paired is not None and run.paired.seeds:  # the timed calls' inputs, picked while paired
                plan = dataclasses.replace(plan, call_seeds=tuple(run.paired.seeds))
            ref = self._reference_outputs(task, plan, timing, run, base)
        except _Early as e:
            return self._shapes_said(task, plan, e.result)
        result = self._judge(task, run, ref, static)
        return self._shapes_said(task, plan, self._triton_aot(task, code, result))

    def _shapes_said(self, task: Task, plan: EvalPlan | None, result: EvalResult) -> EvalResult:
        """On Triton's CPU interpreter: which shapes the trials used and why, in ``extra["shapes"]``, and a message
        when they are smaller than the cpu tier's (:func:`interpreter_shapes`)."""
        if plan is None or not self._interpreted:
            return result
        said = interpreter_shapes(task, self.tier, self.config.tier != "auto")
        result = result.replace(extra={**result.extra, "shapes": said})
        if said["tier"] == "interp":
            result = result.replace(messages=(*result.messages, said["why"]))
        return result

    def _parse(self, response: str, base: EvalResult) -> str:
        """Stage 1: the candidate's code out of the response (``format_error`` when there is none)."""
        ext = extract_candidate(response, self.config.max_response_chars)
        if ext.code is None or ext.syntax_error is not None:
            raise _Early(base.replace(messages=(ext.error or "no candidate",)))
        return ext.code

    def _static_checks(self, code: str, base: EvalResult) -> tuple[str, ...]:
        """Stage 2: the static checks' warnings (their refusal is the verdict)."""
        static = self._static(code)
        if isinstance(static, EvalResult):
            raise _Early(static.replace(task_id=base.task_id, backend=base.backend))
        return static

    def _plan(self, task: Task, seed: int, base: EvalResult) -> tuple[EvalPlan, TimingPlan | None]:
        """Stage 3: refuse a task known broken, guard memory, draw the plan; the reference starts drawing ahead."""
        if task.source_hash in self._broken_tasks:  # its reference failed before: no worker, no candidate verdict
            why = self._broken_tasks[task.source_hash]
            raise _Early(base.replace(stage=Stage.INFRA_ERROR, flags=("task_inputs",), messages=(why,)))
        plan = make_plan(task, self._tier_for(task), self.config, seed)
        timing = self._timing_request(plan)
        if not self.backend.compile_only:
            self._reference.prepare(task, plan, timing)  # its inputs drawn while the candidate runs
        return plan, timing

    def _tier_for(self, task: Task) -> str:
        """The tier this task's inputs are drawn at, after the memory guard (a usage error, before anything is drawn;
        derived tasks know their bytes per call).

        Compile-only evaluations draw no inputs: no guard. A GPU tier chosen by ``tier="auto"`` whose inputs cannot
        fit the worker falls back to the CPU tier (derived to fit); a tier the user chose is refused with the flag
        that fixes it (:func:`~musaenv.tasks.external.check_memory`).
        """
        if self.backend.compile_only:
            return self.tier
        cfg = self.config
        sets = cfg.num_trials + cfg.stress_count + (plan_pool(cfg) if self.backend.device == "cpu" else 1)
        limit = self.config.sandbox.address_space_mb
        try:
            check_memory(task, self.tier, limit, sets)
        except ConfigError as e:
            if self.config.tier != "auto" or self.tier != "gpu" or "cpu" not in task.footprint_bytes:
                raise
            check_memory(task, "cpu", limit, sets)  # still too large: that message, naming the cpu tier, stands
            log.warning("task %s: the gpu tier does not fit this worker, using the cpu tier (%s)", task.id, e)
            return "cpu"
        return self.tier

    def _run_in_worker(self, task: Task, code: str, plan: EvalPlan, base: EvalResult) -> CandidateRun:
        """Stage 4: the candidate in a fresh sandboxed worker, its builds served by the parent (:mod:`.candidate`)."""
        try:
            run = self._run_candidate(task, code, plan, self._pairer(task, plan))
        except RuntimeError as e:
            raise _Early(base.replace(stage=Stage.INFRA_ERROR, messages=(str(e),))) from None
        if run.paired is None or not run.paired.seeds:  # paired calls each draw fresh inputs: none is reused
            run.timing_layout = (self.config.timing.warmup, plan.timing_pool)
        if run.failure is not None and run.failure[0] == "input_error":
            broken = self._task_inputs_failed(task, plan, run)
            if broken is not None:
                raise _Early(base.replace(stage=Stage.INFRA_ERROR, flags=("task_inputs",), messages=(broken,)))
        return run

    def _reference_outputs(
        self, task: Task, plan: EvalPlan, timing: TimingPlan | None, run: CandidateRun, base: EvalResult
    ) -> RefOutputs | None:
        """Stage 5: the reference's outputs (and timing) for the calls the candidate made; ``None`` when there is
        nothing to compare (the run failed or only compiled)."""
        if run.failure is not None or run.compile_only:
            return None
        try:
            # On the CPU an untimed reference run (its timing is cached) needs no exclusive device.
            timed = self.backend.device != "cpu" or self._reference.needs_timing(task, plan, timing)
            limit_s = self.config.run_timeout_s + self.config.timing_timeout_s
            if timed and timing and timing.baseline == "compile":
                limit_s += self.config.compile_timeout_s  # torch.compile of the reference, once per task
            # Probes check a sample of the timed calls by fingerprint; the reference timed beside the candidate
            # fingerprinted every one of them on the same inputs already (checked in the verdict): none needed.
            every = run.paired is not None and run.paired.ref_prints is not None
            kept, probes = _checked_calls(plan, run, 0 if every else self.config.timing.probes)
            have = run.paired.ref_kept if run.paired is not None else {}  # the paired reference's kept outputs
            with self._run_admission(task), (self._device_slot if timed else None) or nullcontext():
                ref = self._reference.run(task, plan, timing, limit_s, [k for k in kept if k not in have], probes)
            _add_rechecks(ref, kept, have)
            self._judge_conditioning(task, plan, run, ref)
        except ReferenceError_ as e:
            if str(e).startswith("the reference program of"):  # its own code failed: refuse the task from now on
                self._broken_tasks[task.source_hash] = f"task refused (its own code fails): {str(e)[:2000]}"
            raise _Early(base.replace(stage=Stage.INFRA_ERROR, messages=(str(e)[:2000],))) from None
        if run.paired is not None:  # timed beside the candidate: its timed outputs check every candidate call
            ref.timing_prints, ref.timing_note = run.paired.ref_prints, run.paired.baseline_note
        return ref

    def _judge_conditioning(self, task: Task, plan: EvalPlan, run: CandidateRun, ref: RefOutputs) -> None:
        """Drop the stress trials the candidate missed where the reference itself is ill-conditioned (its float64
        run disagrees): asked of the reference worker only for those trials (``ref.skips`` updated in place)."""
        misses = unconditioned_misses(run, ref, *self._tolerances(task))
        if misses:
            limit_s = self.config.run_timeout_s
            slot = self._device_slot if self.backend.device != "cpu" else None  # as an untimed reference run
            with self._run_admission(task), slot or nullcontext():
                for i, why in self._reference.condition(task, plan, misses, limit_s).items():
                    ref.skips[i] = why

    def _pairer(self, task: Task, plan: EvalPlan) -> Pairer | None:
        """Starts the reference's side of paired timing when the candidate reaches it (``None``: not paired)."""
        timing = self._timing_request(plan)
        if timing is None or not timing.paired:
            return None
        limit_s = self.config.timing_timeout_s + (self.config.compile_timeout_s if timing.baseline == "compile" else 0)
        ref = self._reference  # warmed ahead once the candidate's trials begin, started at its timing
        start = partial(ref.start_pairing, task, plan, timing, limit_s)
        return Pairer(start, partial(ref.warm_pairing, task, plan, timing))

    def _judge(self, task: Task, run: CandidateRun, ref: RefOutputs | None, static: tuple[str, ...]) -> EvalResult:
        """Stage 6: the verdict (:func:`~musaenv.evaluator.verdict.judge`), the speedup's baseline said."""
        atol, rtol = self._tolerances(task)
        result = judge(
            run,
            ref,
            task_id=task.id,
            backend=self.backend.name,
            device=self.backend.device,
            atol=atol,
            rtol=rtol,
            log_chars=self.config.log_chars,
            static_warnings=static,
            runtime=RuntimeSettings.from_config(self.config),
            timing=timing_method(self.config.timing.reference),
        )
        if ref is not None and ref.timing_note and result.speedup is not None:
            result = result.replace(
                warnings=(*result.warnings, "baseline_eager_fallback"),
                messages=(*result.messages, f"Speedup is against the eager reference: {ref.timing_note}"),
            )
        return self._memory_note(result)

    def _task_inputs_failed(self, task: Task, plan: EvalPlan, run: CandidateRun) -> str | None:
        """Drawing inputs failed in the candidate's worker: the task's fault when the reference process (which never
        runs candidate code) fails too, and then why (the task is refused from now on); ``None`` when only the
        candidate's process failed, which is then the candidate's ``runtime_error``."""
        assert run.failure is not None
        try:
            with self._run_admission(task), self._device_slot or nullcontext():
                self._reference.run(task, plan, None, self.config.run_timeout_s)
        except ReferenceError_ as e:
            why = f"task refused (its own code fails, not the candidate's): {str(e)[:2000]}"
            self._broken_tasks[task.source_hash] = why
            return why
        run.failure = (
            "runtime_error",
            "drawing the task's inputs failed in the candidate's process after the candidate's code ran, while the "
            f"reference process draws them fine:\n{run.failure[1]}",
        )
        return None

    def _triton_aot(self, task: Task, code: str, result: EvalResult) -> EvalResult:
        """Triton through the interpreter: a correct candidate must also compile for a GPU (docs/backends.md)."""
        arch = self.config.triton_aot_arch
        interpreted = get_backend(self.backend.name).cpu_interpreter and self.backend.device == "cpu"
        if not (interpreted and arch) or not result.is_correct:
            return result
        from musaenv.toolchains.triton_aot import triton_aot_check

        gpu_shapes = task.shapes_for("gpu")
        check = triton_aot_check(
            task.source, code, shape=gpu_shapes[0] if gpu_shapes else None, arch=arch,
            timeout_s=self.config.compile_timeout_s,
        )  # fmt: skip
        extra = {**result.extra, "triton_aot": {**check.to_dict(), "log": check.log[-self.config.log_chars :]}}
        compile_s = (result.compile_time_s or 0.0) + check.seconds
        if check.infra_error:  # the host stalled the check: retried, never the candidate's verdict
            return result.replace(
                stage=Stage.INFRA_ERROR, extra=extra, compile_time_s=compile_s,
                messages=(*result.messages, f"GPU compile check: {check.infra_error}"),
            )  # fmt: skip
        if check.inconclusive:
            return result.replace(
                extra=extra,
                compile_time_s=compile_s,
                warnings=(*result.warnings, "triton_aot_inconclusive"),
                messages=(*result.messages, f"GPU compile check inconclusive: {check.inconclusive}"),
            )
        if check.ok:
            return result.replace(extra=extra, compile_time_s=compile_s)
        return result.replace(
            stage=Stage.COMPILE_ERROR,
            extra=extra,
            compile_time_s=compile_s,
            compiler_log=check.log[-self.config.log_chars :],
            messages=(*result.messages, f"correct in Triton's interpreter, but does not compile for sm_{arch}"),
        )

    def _static(self, code: str) -> EvalResult | tuple[str, ...]:
        """Static checks: a verdict when they refuse the candidate, else the warning flags.

        Policy ``off`` skips only the compute checks; the safety bans (exec, processes, network, ...) always run.
        """
        from musaenv.verification.static_py import analyze_candidate

        report = analyze_candidate(code, policy=self.config.static_policy, backend=self.backend.name)
        if not report.errors:
            return tuple(report.warning_flags)
        # Unparseable sources are a format problem, not a cheat.
        # So are builds musaenv does not perform (flags outside the allow-list, musaenv.toolchains.flags).
        unparseable = all(f.flag in ("syntax_error", "too_complex", "build_flag_refused") for f in report.errors)
        return EvalResult(
            stage=Stage.FORMAT_ERROR if unparseable else Stage.CHEATING,
            flags=tuple(report.flags),
            messages=tuple(report.messages),
            warnings=tuple(report.warning_flags),
        )

    def _run_candidate(self, task: Task, code: str, plan: EvalPlan, pairer: Pairer | None = None) -> CandidateRun:
        worker = self._take_worker()
        try:
            return drive_candidate(
                worker,
                self._request(task, code, plan, worker),
                self.config,
                self.backend.name,
                self.backend.compile_only,
                device_slot=self._device_slot,
                binary_policy=self._binary_policy(),
                pairer=pairer,
                memory_slot=None if self.backend.compile_only else self._run_admission(task),
            )
        finally:
            worker.close()

    def _binary_policy(self) -> str | None:
        """The policy every built module is judged under by its imports (:mod:`musaenv.verification.binary_imports`;
        ``None``: not judged). The static policy: the binary check is what decides the static layer's C++ verdict."""
        return self.config.static_policy

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        self._reference.close()
        for server in (self._server, self._reference.fork_server):
            if server is not None:
                forkserver.release(server)
        self._server = None

    def __enter__(self) -> LocalEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: best effort
            self.close()
