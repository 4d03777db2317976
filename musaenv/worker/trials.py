"""Correctness trials and timed calls of one program, shared by the candidate and the reference worker.

Runs beside candidate code (in a candidate worker) or a reference (in the reference worker); sends the outputs as
:mod:`musaenv.isolation.messages` records and never judges them: the parent compares them with reference outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from musaenv.isolation.channel import Channel, ProtocolError
from musaenv.isolation.messages import (
    RunRequest,
    TimeCall,
    TimeDone,
    TimeEnd,
    TimePrepare,
    TimeReady,
    Timing,
    Trial,
    TrialStats,
)
from musaenv.timing.timers import DeviceClock, TimedRun, clone_args, output_fingerprint, time_forward, time_gated
from musaenv.verification.runtime_probe import RuntimeGuard
from musaenv.worker.failures import InputDrawError, format_exc
from musaenv.worker.harness import DrawnInputs, ProgramModule, flatten_outputs, tensor_to_array, to_device

__all__ = ["ChannelGate", "OutputCheck", "StressCheck", "configure_device", "run_timing", "run_trials"]

# The candidate worker's checks of one call: (outputs, the inputs it got, their untouched copies) -> flags.
OutputCheck = Callable[[list[Any], list[Any], list[Any]], list[str]]
# The reference worker's judgement of a stress trial: (model, inputs, outputs) -> why it does not count, or "".
StressCheck = Callable[[Any, list[Any], list[Any]], str]


def configure_device(req: RunRequest) -> torch.device:
    """Thread count, fixed numerics flags and (for MUSA) torch_musa, as the request asks; returns the device."""
    torch.set_num_threads(req.cpu_threads)
    if req.device.startswith("musa"):
        _import_torch_musa()
    # Fixed numerics for reference and candidate alike (KernelBench references fail 1e-4 under TF32).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.device(req.device)


def _import_torch_musa() -> None:
    """torch_musa registers the ``musa`` device, ``torch.musa`` and its extension loader; it must come first."""
    try:
        import torch_musa  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            "device 'musa' needs torch_musa in the worker: install Moore Threads' torch_musa wheel matching "
            f"torch {torch.__version__} ({e})"
        ) from None


def _send_trial(chan: Channel, index: int, outs: list[Any], flags: list[str], skip: str = "") -> None:
    tensors = [o for o in outs if type(o) is torch.Tensor]
    arrays = [] if flags and "output_not_tensor" in flags else [tensor_to_array(o) for o in tensors]
    dtypes = [str(o.dtype).replace("torch.", "") for o in tensors]
    chan.send(Trial(index=index, dtypes=dtypes, flags=flags, skip=skip).to_dict(), arrays)


def run_trials(
    chan: Channel,
    req: RunRequest,
    program: ProgramModule,
    model_cls: Any,
    device: torch.device,
    check: OutputCheck | None,
    drawn: DrawnInputs,
    probe: RuntimeGuard | None = None,
    stress: StressCheck | None = None,
) -> dict[int, Any]:
    """Run every trial; returns the model built for each shape index (reused for timing).

    ``check``: the candidate worker's output checks (each call then gets private copies of its inputs), passed
    by the caller so that a candidate that replaces them is seen replacing the caller's (its runtime guard
    watches them); ``None`` for the trusted reference. ``stress``: the reference's judgement of each stress
    trial (one with a ``scale``), sent as :attr:`Trial.skip`.
    """
    guarded = check is not None
    models: dict[int, Any] = {}
    for index, trial in enumerate(req.trials):
        k = trial.shape_index
        if k not in models:
            models[k] = program.build_model(model_cls, req.shapes[k], req.init_seed, device)
        program.apply_shape(req.shapes[k])
        try:
            inputs = to_device(drawn.trial_inputs(program, trial), device)
        except Exception as e:  # the task's own code: never the candidate's verdict (see _trials_phase)
            raise InputDrawError(f"drawing the inputs of trial {index + 1} failed:\n{format_exc(e)}") from None
        private = clone_args(inputs) if guarded else inputs
        if probe is not None:
            probe.before_call()
        with torch.no_grad():
            outs = flatten_outputs(models[k](*private))
        DeviceClock(str(device)).sync()
        if probe is not None:
            probe.after_call(outs)
        flags = check(outs, private, inputs) if check is not None else []
        if trial.stats:  # a probed timed call of the reference: its stats are all the parent needs
            chan.send(TrialStats(index=index, stats=output_fingerprint(outs, reference=True)).to_dict())
            continue
        skip = stress(models[k], private, outs) if stress is not None and trial.scale is not None else ""
        _send_trial(chan, index, outs, flags, skip)
    return models


def run_timing(
    chan: Channel,
    req: RunRequest,
    program: ProgramModule,
    model: Any,
    device: torch.device,
    drawn: DrawnInputs,
    note: dict[str, Any] | None = None,
    reference_prints: bool = False,
    around_draw: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> tuple[TimedRun, Callable[[], list[list[Any]]]]:
    """Time ``model`` on the timing pool; sends the ``timing`` message (plus ``note``), returns the run and the
    inputs for the runtime checks' re-measure (drawn when asked for: the reference never asks).

    ``reference_prints``: fingerprints in the reference's form (the eager reference, whose timed outputs bound
    every timed output of a candidate on the same pool). ``around_draw``: entered around each draw of a timed
    call's inputs (the candidate worker's :meth:`~musaenv.verification.draw_watch.DrawWatch.around`)."""
    t = req.timing
    assert t is not None
    program.apply_shape(req.shapes[0])

    def draw(seed: int) -> list[Any]:
        try:
            with around_draw():
                return to_device(program.inputs(seed), device)
        except Exception as e:
            raise InputDrawError(f"drawing the timing inputs (seed {seed}) failed:\n{format_exc(e)}") from None

    clock = DeviceClock(str(device))
    common: dict[str, Any] = dict(warmup=t.warmup, repeats=t.repeats, keep=list(t.keep))
    common.update(flush_bytes=t.flush_bytes, reference=reference_prints)
    with torch.no_grad():
        if t.paired:  # the parent times each call and sends its inputs' seed (musaenv.evaluator.pairing)
            gate = ChannelGate(chan)
            warm = [t.seed + t.pool + j for j in range(t.warmup)]  # none a timed call's
            run = time_gated(model, [], clock, gate, draw=draw, warmup_seeds=warm, **common)
            # the runtime checks after timing re-run a few calls: on one timed call's input, drawn again then
            seeds = gate.seeds[:1] or warm[:1] or [t.seed]
            pool: Callable[[], list[list[Any]]] = lambda: [draw(s) for s in seeds]  # noqa: E731
        else:
            try:
                drawn_pool = [to_device(args, device) for args in drawn.pool_inputs(program, t)]
            except Exception as e:
                raise InputDrawError(f"drawing the timing inputs failed:\n{format_exc(e)}") from None
            run = time_forward(model, drawn_pool, clock, max_time_s=t.max_time_s, **common)
            pool = lambda: drawn_pool  # noqa: E731
    kept_idx = sorted(run.kept_outputs)
    arrays: list[Any] = []
    counts: list[int] = []
    for i in kept_idx:
        outs = [o for o in flatten_outputs(run.kept_outputs[i]) if type(o) is torch.Tensor]
        counts.append(len(outs))
        arrays.extend(tensor_to_array(o) for o in outs)
    msg = Timing(run.samples_ms, run.host_samples_ms, kept_idx, counts, run.fingerprints, **(note or {}))
    chan.send(msg.to_dict(), arrays)
    return run, pool


class ChannelGate:
    """The worker's side of paired timing: each timed call waits for the parent's :class:`TimeCall`."""

    def __init__(self, chan: Channel) -> None:
        self.chan = chan
        self.seeds: list[int] = []  # the seeds of the timed calls' inputs, in order

    def prepare(self, index: int) -> int | None:
        """Wait: the seed of the parent's :class:`TimePrepare` of ``index``, ``None`` on :class:`TimeEnd`."""
        msg, _ = self.chan.recv()
        if msg.get("type") == TimeEnd.TYPE:
            return None
        prep = TimePrepare.from_dict(msg) if msg.get("type") == TimePrepare.TYPE else None
        if prep is None or prep.index != index:
            raise ProtocolError(f"expected the parent's word to prepare timed call {index}, got {msg!r}"[:300])
        if prep.seed >= 0:
            self.seeds.append(prep.seed)
        return prep.seed

    def ready(self, index: int) -> None:
        """Send :class:`TimeReady` and wait for the parent's :class:`TimeCall` of ``index``."""
        self.chan.send(TimeReady(index=index).to_dict())
        msg, _ = self.chan.recv()
        if msg.get("type") != TimeCall.TYPE or TimeCall.from_dict(msg).index != index:
            raise ProtocolError(f"expected the parent's call of timed call {index}, got {msg!r}"[:300])

    def done(self, index: int, ms: float) -> None:
        """Send :class:`TimeDone` (the parent's clock stops when it reads it)."""
        self.chan.send(TimeDone(index=index, ms=ms).to_dict())
