"""Reference outputs and timings, computed in a long-lived worker that never runs candidate code.

By default the reference is timed call by call beside the candidate (paired timing, :mod:`.pairing`; started
here by :meth:`ReferenceService.start_pairing`). With ``TimingConfig.reference="dedicated_host"`` reference
timings are cached (:mod:`.reftime`), so a reference is timed once per machine, in a clean process with fixed
numerics flags.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from musaenv.config import TimingConfig
from musaenv.evaluator.awake import awake_cores
from musaenv.evaluator.cpu_watch import pin_threads, timing_cpus
from musaenv.evaluator.memory import PeakMeter
from musaenv.evaluator.pairing import PairingError, RefSession, end_unused
from musaenv.evaluator.plan import EvalPlan, StressTrial
from musaenv.evaluator.reftime import RefTimeCache
from musaenv.isolation import forkserver
from musaenv.isolation.channel import ProtocolError, Stalled
from musaenv.isolation.forkserver import ForkServer
from musaenv.isolation.limits import StageClock
from musaenv.isolation.messages import (
    ConditionRequest,
    DrawRequest,
    PairedRequest,
    ReferenceRequest,
    Result,
    Timing,
    Trial,
    TrialStats,
    decode,
)
from musaenv.isolation.plans import TimingPlan, TrialSpec
from musaenv.isolation.process import WorkerProcess
from musaenv.tasks.task import Task
from musaenv.timing.method import timing_method
from musaenv.types import TimingStats

__all__ = ["RefOutputs", "ReferenceError_", "ReferenceService"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

WORKER_START_TIMEOUT_S = 180.0
_LIMIT_POLL_S = 0.25  # how often the run's limits are checked while the reference worker is silent


def _draw_id(task: Task, plan: EvalPlan) -> str:
    """Names one plan's inputs, so a reference request uses only inputs drawn for exactly that plan."""
    return hashlib.sha256(f"{task.source_hash}|{plan!r}".encode()).hexdigest()[:16]


class ReferenceError_(Exception):
    """The reference could not be computed: an infra error, never the candidate's fault."""


@dataclass
class RefOutputs:
    """Reference results for one plan: per-trial outputs (arrays, dtypes), recheck outputs, timing.

    ``rechecks`` reproduce the timed calls ``recheck_calls`` (compared in full); ``probe_stats`` hold, per call of
    ``probe_calls``, the reference's ``[sum, sum^2, sum |r|, n]`` per output (the worker's fingerprints of those
    calls are checked against them; no output array is sent for a probe).

    ``stress`` maps the index of each stress trial in ``trials`` to its :class:`~musaenv.evaluator.plan.StressTrial`;
    ``skips`` holds, per trial, why the reference worker dropped it (its outputs there are not finite or
    ill-conditioned; ``""``: it counts).
    """

    trials: list[tuple[list[np.ndarray], list[str]]] = field(default_factory=list)
    stress: dict[int, StressTrial] = field(default_factory=dict)
    skips: list[str] = field(default_factory=list)
    rechecks: list[tuple[list[np.ndarray], list[str]]] = field(default_factory=list)
    timing: TimingStats | None = None
    recheck_calls: list[int] = field(default_factory=list)
    probe_calls: list[int] = field(default_factory=list)
    probe_stats: list[Any] = field(default_factory=list)
    timing_note: str = ""  # set when the timed baseline is not the one asked for (torch.compile failed)
    # Per timed call of the eager reference timed in this run (same pool and call order as the candidate's),
    # ``[sum, sum^2, sum |r|, n]`` per output: every timed call of the candidate is checked against them.
    timing_prints: list[Any] | None = None


class ReferenceService:
    """Runs reference programs for an evaluator (one persistent worker, restarted when it dies).

    ``extra_env`` pins the device (``CUDA_VISIBLE_DEVICES``, ...) like the candidates'. With ``fork_server`` the
    worker is forked from it (started with :func:`~musaenv.isolation.process.worker_env` of ``cpu_threads`` and
    ``extra_env``); the reference still never shares a process with candidate code.
    """

    def __init__(
        self,
        device: str,
        cpu_threads: int,
        timing: TimingConfig,
        cache_root: Path,
        fork_server: ForkServer | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.device = device
        self.fork_server = fork_server
        self.extra_env = dict(extra_env or {})
        self.cpu_threads = cpu_threads
        self.timing = timing
        self.method = timing_method(timing.reference)  # how the reference is timed, and the version in its key
        self.times = RefTimeCache(cache_root / "reftime", device, cpu_threads, timing, self.method)
        self.task_peaks: dict[str, float] = {}  # task source hash -> MB its reference added at its peak
        self._worker: WorkerProcess | None = None
        self._session: RefSession | None = None  # the last paired timing (a broken one took its worker along)
        self._ahead: tuple[WorkerProcess, dict[str, Any]] | None = None  # a paired request sent ahead (warm_pairing)

    def cached_timing(self, task: Task, plan: EvalPlan) -> TimingStats | None:
        """The cached reference timing for this task and shape, if any (only with ``reference="dedicated_host"``)."""
        cached = self.times.get(task, plan)
        return cached[0] if cached else None

    def _ensure_worker(self, keep_ahead: bool = False) -> WorkerProcess:
        if self._ahead is not None and not keep_ahead:
            self._end_ahead()
        if self._session is not None and self._session.broken and self._session.worker is self._worker:
            self._worker = None  # closed mid-protocol by the pairing: its exit status may not be known yet
        self._session = None
        server_gone = self.fork_server is not None and not self.fork_server.alive  # its workers died with it
        if self._worker is None or server_gone or self._worker.poll() is not None:
            if self._worker is not None:
                self._worker.close()
            if self.fork_server is not None:  # the shared server may have died, and its workers with it
                self.fork_server = forkserver.renew(self.fork_server)
            self._worker = WorkerProcess("reference", self.cpu_threads, self.extra_env, self.fork_server)
        if not self._worker.wait_ready(WORKER_START_TIMEOUT_S):
            why = self._worker.start_error or self._worker.log_tail()
            self._worker.close()
            self._worker = None
            raise ReferenceError_(f"the reference worker did not start:\n{why}")
        return self._worker

    def run(
        self,
        task: Task,
        plan: EvalPlan,
        timing_cfg: TimingPlan | None,
        timeout_s: float,
        recheck_calls: Sequence[int] | None = None,
        probe_calls: Sequence[int] = (),
    ) -> RefOutputs:
        """Compute reference outputs (and timing, unless cached); retries once on a dead worker.

        ``recheck_calls``: timed calls whose outputs are rechecked (default: the plan's ``keep``);
        ``probe_calls``: timed calls whose fingerprints are checked (the reference sends its stats of them).
        """
        calls, probes = list(plan.keep if recheck_calls is None else recheck_calls), list(probe_calls)
        out = self._twice("reference computation", self._run_once, task, plan, timing_cfg, timeout_s, calls, probes)
        out.recheck_calls, out.probe_calls = calls, probes
        return out

    def _twice(self, what: str, attempt: Callable[..., _T], *args: Any) -> _T:
        """``attempt(*args)``, once more with a fresh worker when the worker died or broke the protocol."""
        for n in (1, 2):
            try:
                return attempt(*args)
            except (EOFError, ProtocolError, OSError, TimeoutError) as e:
                log.warning("reference worker failed in %s (attempt %d): %s", what, n, e)
                if self._worker is not None:
                    self._worker.close()
                    self._worker = None
                err = e
        raise ReferenceError_(f"{what} failed twice: {err}")

    def _request(
        self,
        task: Task,
        plan: EvalPlan,
        timing_cfg: TimingPlan | None,
        calls: Sequence[int] | None = None,
        probes: Sequence[int] = (),
        kind: type[ReferenceRequest] = ReferenceRequest,
    ) -> ReferenceRequest:
        cached = self.cached_timing(task, plan) if timing_cfg else None
        if self.paired and kind is ReferenceRequest:  # timed beside the candidate instead (start_pairing)
            cached, timing_cfg = None, None
        stats = [TrialSpec(k, seed, stats=True) for k, seed in plan.recheck_trials(probes)]
        return kind(
            task_hash=task.source_hash,
            task_source=task.source,
            shapes=[dict(s) for s in plan.shapes],
            init_seed=plan.init_seed,
            device=self.device,
            cpu_threads=self.cpu_threads,
            trials=plan.trial_specs(plan.recheck_trials(calls)) + stats,
            timing=timing_cfg if (timing_cfg and cached is None) else None,
            draw_id=_draw_id(task, plan),
            atol=float(task.atol),
            rtol=float(task.rtol),
        )

    @property
    def paired(self) -> bool:
        """True when the reference is timed beside each candidate, call by call (:meth:`start_pairing`)."""
        return self.method.gated

    def needs_timing(self, task: Task, plan: EvalPlan, timing_cfg: TimingPlan | None) -> bool:
        """True when :meth:`run` will time the reference (timing requested, not paired and not cached yet)."""
        return bool(timing_cfg) and not self.paired and self.cached_timing(task, plan) is None

    def warm_pairing(self, task: Task, plan: EvalPlan, timing_cfg: TimingPlan) -> None:
        """Send the paired request ahead (CPU only; best effort), on the untimed cores: the reference's model is
        built and its warm-up calls run while the candidate runs its trials, and :meth:`start_pairing` for the same
        request then only pins the worker to the timing cores. One no pairing uses is ended at the next request."""
        if self.device != "cpu":
            return
        try:
            worker = self._ensure_worker()
            pin_threads(worker.pid, set(os.sched_getaffinity(0)))
            req = self._request(task, plan, replace(timing_cfg, paired=True), kind=PairedRequest).to_dict()
            worker.chan.send(req)
        except (ReferenceError_, OSError) as e:
            log.debug("reference warm-up not started ahead: %s", e)
            return
        self._ahead = (worker, req)

    def _end_ahead(self) -> None:
        """End the paired request sent ahead that no pairing used (its worker restarted if it does not end)."""
        assert self._ahead is not None
        worker, self._ahead = self._ahead[0], None
        if worker is self._worker and worker.poll() is None and not end_unused(worker):
            worker.close()
            self._worker = None

    def start_pairing(self, task: Task, plan: EvalPlan, timing_cfg: TimingPlan, timeout_s: float) -> RefSession:
        """Start the reference's side of paired timing (:mod:`.pairing`): the worker pinned to the timing cores
        a candidate gets, its warm-up under way (or done: :meth:`warm_pairing`), its calls waiting for the parent.

        Raises:
            PairingError: the worker could not be started or asked.
        """
        try:
            req = self._request(task, plan, replace(timing_cfg, paired=True), kind=PairedRequest).to_dict()
            pending = self._ahead if self._ahead is not None and self._ahead[1] == req else None
            worker = self._ensure_worker(keep_ahead=pending is not None)
            self._ahead = None
            if self.device == "cpu":
                pin_threads(worker.pid, timing_cpus(self.cpu_threads))
            if pending is None or pending[0] is not worker:  # not sent ahead, or to a worker that has since died
                worker.chan.send(req)
        except (ReferenceError_, OSError) as e:
            if self._worker is not None:
                self._worker.close()
                self._worker = None
            raise PairingError(f"the reference worker could not start paired timing: {e}") from None
        self._session = RefSession(worker, StageClock(worker.pid, timeout_s))
        return self._session

    def prepare(self, task: Task, plan: EvalPlan, timing_cfg: TimingPlan | None) -> None:
        """Let the worker draw this plan's inputs now (CPU only; no reply), before :meth:`run` needs the device.

        Best effort: if the worker is not there or the draw fails, :meth:`run` draws them itself.
        """
        if self.device != "cpu":
            return  # GPU-tier inputs are large; drawn in the run, straight to the device
        try:
            worker = self._ensure_worker()
            worker.chan.send(self._request(task, plan, timing_cfg, kind=DrawRequest).to_dict())
        except (ReferenceError_, OSError) as e:
            log.debug("reference inputs not drawn ahead: %s", e)

    def _run_once(
        self,
        task: Task,
        plan: EvalPlan,
        timing_cfg: TimingPlan | None,
        timeout_s: float,
        calls: list[int],
        probes: list[int],
    ) -> RefOutputs:
        worker = self._ensure_worker()
        req = self._request(task, plan, timing_cfg, calls, probes)
        cached = self.times.get(task, plan) if timing_cfg and not req.timing else None
        # timed on the same cores a candidate's timed calls get; untimed, anywhere
        timed_cpus = timing_cpus(self.cpu_threads) if req.timing and self.device == "cpu" else None
        pin_threads(worker.pid, timed_cpus or set(os.sched_getaffinity(0)))
        out = RefOutputs(timing=cached[0] if cached else None, recheck_calls=calls)
        out.timing_note = cached[1] if cached else ""
        with awake_cores(timed_cpus) if timed_cpus else nullcontext():  # see .awake
            collected, skips = self._exchange(worker, req, task, plan, timeout_s, out)
        n = plan.n_trials
        out.trials, out.rechecks, out.skips = collected[:n], collected[n:], skips[:n]
        out.stress = {len(plan.trials) + j: t for j, t in enumerate(plan.stress)}
        return out

    def condition(self, task: Task, plan: EvalPlan, trials: Sequence[int], timeout_s: float) -> dict[int, str]:
        """Judge the conditioning of the stress trials ``trials`` (indexes into ``plan.trial_specs()``, those a
        candidate missed): per trial, why it does not count (the reference in float64 disagrees, or cannot run in
        float64), or ``""``. The reference worker runs each again in the task's dtype and in float64.

        Raises:
            ReferenceError_: the worker failed twice, or the reference program failed.
        """
        specs = plan.trial_specs()
        req = replace(self._request(task, plan, None, kind=ConditionRequest), trials=[specs[i] for i in trials])

        def ask() -> dict[int, str]:
            worker = self._ensure_worker()
            pin_threads(worker.pid, set(os.sched_getaffinity(0)))
            _, skips = self._exchange(worker, req, task, plan, timeout_s, RefOutputs(), peak=False)
            if len(skips) != len(trials):
                raise ProtocolError(f"{len(skips)} conditioning verdicts for {len(trials)} trials")
            return dict(zip(trials, skips))

        return self._twice("the reference's conditioning check", ask)

    def _exchange(
        self,
        worker: WorkerProcess,
        req: ReferenceRequest,
        task: Task,
        plan: EvalPlan,
        timeout_s: float,
        out: RefOutputs,
        peak: bool = True,
    ) -> tuple[list[tuple[list[np.ndarray], list[str]]], list[str]]:
        """Send ``req`` and read the worker's answer into ``out`` (probe stats, timing) until its result; returns
        the trials' outputs and skips in order. ``peak``: record the task's memory peak (not for a float64 check,
        whose copy of the model is no memory the task needs)."""  # fmt: skip
        meter = PeakMeter(worker.pid) if peak else None  # the task's memory: a candidate's budget derives from it
        worker.chan.send(req.to_dict())
        collected: list[tuple[list[np.ndarray], list[str]]] = []
        skips: list[str] = []
        clock = StageClock(worker.pid, timeout_s)  # CPU and own time of the reference, wall clock as a backstop
        while True:
            try:
                got = worker.chan.recv_before(time.monotonic() + _LIMIT_POLL_S, clock.over)
                why = clock.over() if got is None else None
            except Stalled as e:
                got, why = None, e.reason
            if got is None:
                if why is None:
                    continue
                raise TimeoutError(f"reference for {task.id}: {clock.describe('reference', why)}")
            msg, arrays = decode(got[0], TrialStats, Trial, Timing, Result), got[1]
            if isinstance(msg, TrialStats):
                out.probe_stats.append(msg.stats)
            elif isinstance(msg, Trial):
                collected.append((arrays, msg.dtypes))
                skips.append(msg.skip)
            elif isinstance(msg, Timing):
                out.timing = TimingStats.from_samples(msg.samples_ms)
                out.timing_note = msg.baseline_note
                if msg.baseline == "eager":
                    out.timing_prints = msg.fingerprints
                self.times.put(task, plan, out.timing, out.timing_note)
            elif isinstance(msg, Result):
                if msg.failure is not None:
                    raise ReferenceError_(f"the reference program of {task.id} failed:\n{msg.failure.log}")
                mb = meter.task_peak_mb() if meter is not None else None
                if mb is not None:
                    self.task_peaks[task.source_hash] = max(mb, self.task_peaks.get(task.source_hash, 0.0))
                return collected, skips

    def close(self) -> None:
        """Stop the reference worker."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
