"""Reference worker loop: trusted reference programs only, many requests, in a process no candidate touched.

Requests (from :class:`~musaenv.evaluator.reference.ReferenceService`; records of :mod:`musaenv.isolation.messages`):

* ``draw`` (:class:`~musaenv.isolation.messages.DrawRequest`): draw a coming request's inputs now (CPU only), while
  the candidate still runs and does not hold the device, so the reference's turn on the device is shorter. No
  reply; a failed draw is simply redone later.
* ``reference`` (:class:`~musaenv.isolation.messages.ReferenceRequest`): correctness trials (and timing, unless
  cached) of the task's ``Model``; answered with ``trial``, ``trial_stats`` and ``timing`` messages and a
  ``result``. Uses the drawn inputs when its ``draw_id`` matches the last draw.
* ``paired`` (:class:`~musaenv.isolation.messages.PairedRequest`): time the reference call by call on the parent's
  ``time_call`` messages, interleaved with a candidate worker's calls (:mod:`musaenv.evaluator.pairing`); answered
  with ``time_ready`` / ``time_done`` per call, a ``timing`` message and a ``result``. Uses (without consuming) the
  inputs of the last draw when its ``draw_id`` matches.
* ``condition`` (:class:`~musaenv.isolation.messages.ConditionRequest`): the stress trials a candidate missed, run
  again in the task's dtype and in float64 (:func:`stress_skip` with ``condition``); answered with a ``trial`` per
  trial (its ``skip``) and a ``result``. A ``reference`` request judges only finiteness: the float64 run (8x the
  float32 forward on a linear layer) changes a verdict only where the candidate missed the trial.
* ``shutdown``.
"""

from __future__ import annotations

import copy
import ctypes
from typing import Any

import torch

from musaenv.isolation.channel import Channel, ProtocolError
from musaenv.isolation.messages import (
    ConditionRequest,
    DrawRequest,
    Failure,
    FailureStage,
    PairedRequest,
    ReferenceRequest,
    Result,
    Shutdown,
    decode,
)
from musaenv.timing.timers import clone_args
from musaenv.worker.failures import format_exc
from musaenv.worker.harness import (
    DrawnInputs,
    ProgramModule,
    draw_inputs,
    flatten_outputs,
    load_program,
    to_device,
)
from musaenv.worker.trials import configure_device, run_timing, run_trials

__all__ = ["serve_reference", "stress_skip"]

# A stress trial counts only where the reference's own rounding leaves an honest kernel room: its outputs within a
# quarter of the tolerance of the same program run in float64 on the same (exactly widened) inputs. Past that the
# trial measures rounding order, not the algorithm (the layernorm task at offset 1000: the fp32 reference takes
# 0.6 of the tolerance, a naive honest two-pass kernel 5 times it), and it is dropped, never charged.
CONDITION_SHARE = 0.25


def _program(cache: dict[str, ProgramModule], req: ReferenceRequest) -> ProgramModule:
    key = req.task_hash
    if key not in cache:
        device = torch.device(req.device)
        cache[key] = ProgramModule(
            load_program(req.task_source, "reference", "<reference>"),
            device if device.type == "cuda" else None,
            device=device,
        )
    return cache[key]


def _draw(cache: dict[str, ProgramModule], req: DrawRequest) -> tuple[str, DrawnInputs] | None:
    try:
        configure_device(req)
        return req.draw_id, draw_inputs(req, _program(cache, req))
    except Exception:  # drawn again (and reported) by the reference request itself
        return None


_PURITY: dict[str, str] = {}  # task hash -> "" (pure) or why not


class ImpureReference(Exception):
    """The reference's output for one input changes from one call to the next: the task cannot be verified."""


def _purity(program: ProgramModule, req: ReferenceRequest, device: torch.device) -> str:
    """``""`` when a fresh reference model gives the same outputs (within the task's tolerance) on two calls with
    one input, else why not. Every check here (trials, rechecks, repeats, timed-call fingerprints) assumes a pure
    forward: a model that keeps state between calls (an RNN starting each call from the ``self.hidden`` its last
    call stored) or draws random numbers would make honest kernels look wrong.
    """
    model = program.build_model(program.module.Model, req.shapes[0], req.init_seed, device)
    args = to_device(program.inputs(req.init_seed + 2), device)
    with torch.no_grad():
        runs = [[o.detach().clone() for o in flatten_outputs(model(*clone_args(args)))] for _ in range(2)]
    atol, rtol = req.atol, req.rtol
    for i, (a, b) in enumerate(zip(*runs)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            continue
        same = a.shape == b.shape and (
            torch.equal(a, b)
            or (a.is_floating_point() and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))
        )
        if not same:
            return (
                f"the reference program's output {i} differs between two calls of one model on the same input "
                "(it keeps state between calls, e.g. a hidden state carried to the next call, or draws "
                "random numbers in forward). musaenv compares outputs call by call and cannot verify such a "
                "task; make forward a pure function of its inputs and parameters (e.g. pass the state as an input)."
            )
    return ""


def stress_skip(
    model: Any, inputs: list[Any], outs: list[Any], atol: float, rtol: float, condition: bool = True
) -> str:
    """Why a stress trial's reference outputs ``outs`` (of ``model`` on ``inputs``) do not count, or ``""``: an
    output is not finite, or (with ``condition``) a copy of the model in float64 disagrees
    (:data:`CONDITION_SHARE`), or cannot run."""
    tensors = [o for o in outs if isinstance(o, torch.Tensor)]
    if any(o.is_floating_point() and not _all_finite(o) for o in tensors):
        return "the reference's outputs are not finite on these inputs"
    if not condition or not any(o.is_floating_point() for o in tensors):
        return ""  # integer outputs (argmax, ...): exact, nothing to condition
    wide_args = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in inputs]
    try:
        with torch.no_grad():
            outs64 = flatten_outputs(copy.deepcopy(model).double()(*wide_args))
        wide = [o for o in outs64 if isinstance(o, torch.Tensor)]
    except Exception as e:  # a program fixed to float32 inside forward: its conditioning cannot be checked
        return f"the reference could not run in float64 to check its conditioning ({type(e).__name__})"
    share = CONDITION_SHARE
    for o, w in zip(tensors, wide):
        if o.is_floating_point() and not _close(o.double(), w.double(), atol * share, rtol * share):
            return f"the reference in {str(o.dtype).replace('torch.', '')} and in float64 disagree (ill-conditioned)"
    return ""


def _all_finite(o: torch.Tensor) -> bool:
    """No NaN or Inf in ``o``. Narrower floats are summed in float64, where no sum of finite values overflows and
    every NaN or Inf carries through: one 2M-element reduction (0.3 ms) instead of ``isfinite(o).all()`` (13 ms)."""
    if o.dtype == torch.float64 or o.is_complex():
        return bool(torch.isfinite(o).all())
    return bool(torch.isfinite(o.sum(dtype=torch.float64)))


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    """``torch.allclose(a, b, atol, rtol)`` (NaN never close) for the float64 outputs of a stress trial, in two
    temporaries and one reduction: 9 ms on 2M elements where ``allclose`` takes 90 (it was most of a stress trial's
    cost). Every ``|a - b| - rtol |b| <= atol``, read from their maximum (a NaN anywhere makes it NaN: not close)."""
    if a.numel() == 0 and b.numel() == 0:
        return True
    d = torch.sub(a, b).abs_()
    d.sub_(b.abs().mul_(rtol))
    return bool(d.max() <= atol)


def _run(chan: Channel, req: ReferenceRequest, program: ProgramModule, drawn: DrawnInputs) -> None:
    device = configure_device(req)
    model_cls = program.module.Model
    if isinstance(req, PairedRequest):  # timing only: its trials come in the evaluation's reference request
        _time(chan, req, program, program.build_model(model_cls, req.shapes[0], req.init_seed, device), drawn)
        return
    condition = isinstance(req, ConditionRequest)  # else finiteness only (the module's docstring says why)
    key = req.task_hash
    if key not in _PURITY:  # once per task and worker
        _PURITY[key] = _purity(program, req, device)
    if _PURITY[key]:
        raise ImpureReference(_PURITY[key])

    def stress(model: Any, inputs: list[Any], outs: list[Any]) -> str:
        return stress_skip(model, inputs, outs, req.atol, req.rtol, condition)

    models = run_trials(chan, req, program, model_cls, device, None, drawn=drawn, stress=stress)
    if req.timing and not condition:
        if 0 not in models:
            models[0] = program.build_model(model_cls, req.shapes[0], req.init_seed, device)
        _time(chan, req, program, models[0], drawn)


def _time(chan: Channel, req: ReferenceRequest, program: ProgramModule, model: Any, drawn: DrawnInputs) -> None:
    """Time ``model`` (or its torch.compile baseline) on the plan's timing pool; sends the ``timing`` message."""
    assert req.timing is not None
    device = torch.device(req.device)
    baseline: Any = model
    note: dict[str, Any] = {}
    if req.timing.baseline == "compile":  # the torch.compile baseline; outputs stay eager
        program.apply_shape(req.shapes[0])
        pool = drawn.pool_inputs(program, req.timing)
        drawn = DrawnInputs(drawn.trials, pool)  # drawn once, for the compiling call and the timing
        baseline, note = _compiled(model, pool, device)
    eager = note.get("baseline", "eager") == "eager"  # compiled outputs may differ within tolerance
    run_timing(chan, req, program, baseline, device, drawn, note, reference_prints=eager)


def _compiled(model: Any, pool: list[list[Any]], device: torch.device) -> tuple[Any, dict[str, Any]]:
    """``torch.compile(model)``, compiled by one untimed call, so compilation never enters the timing.

    When torch.compile fails on this program the eager model is timed instead, and the timing message says so
    (``baseline: eager`` and why): the evaluation keeps its verdict and the speedup is marked, never lost.
    """
    try:  # torch.compile itself can fail too (e.g. an inductor that does not match the installed triton)
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*clone_args(to_device(pool[0], device)))
    except Exception as e:
        reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
        return model, {"baseline": "eager", "baseline_note": f"torch.compile failed ({reason}); timed eager"}
    return compiled, {"baseline": "compile"}


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``); False where there is none.

    The steady allocator (``TimingConfig.allocator``) never trims on its own, and the parent measures a task's peak as
    what its run adds over the memory this long-lived worker held before it (``evaluator.memory.PeakMeter``): pages
    an earlier, larger task left in the heap would hide the next task's peak and shrink its candidates' budget. So
    the worker trims after each request, before its result (the parent's next measurement starts after it)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


def serve_reference(chan: Channel) -> None:
    """Serve reference requests until the parent closes the channel."""
    cache: dict[str, ProgramModule] = {}
    pending: tuple[str, DrawnInputs] | None = None
    while True:
        try:
            msg, _ = chan.recv()
        except EOFError:
            return
        try:
            req = decode(msg, Shutdown, DrawRequest, PairedRequest, ConditionRequest, ReferenceRequest)
        except ProtocolError as e:  # the parent's own request: answered as the harness's failure
            if msg.get("type") != DrawRequest.TYPE:  # a draw gets no reply: its inputs are drawn again later
                why = Failure(FailureStage.INFRA_ERROR, f"malformed reference request: {e}")
                chan.send(Result(failure=why).to_dict())
            continue
        if isinstance(req, Shutdown):
            return
        if isinstance(req, DrawRequest):
            pending = _draw(cache, req)
            continue
        assert isinstance(req, ReferenceRequest)  # the last types decode allows
        drawn = pending[1] if pending is not None and pending[0] == req.draw_id else DrawnInputs.nothing()
        if not isinstance(req, (PairedRequest, ConditionRequest)):  # they leave the draw to the request it is for
            pending = None
        try:
            _run(chan, req, _program(cache, req), drawn)
            release_free_memory()
            chan.send(Result().to_dict())
        except BaseException as e:  # a broken reference is the harness's problem: report, keep serving
            log = str(e) if isinstance(e, ImpureReference) else format_exc(e)
            release_free_memory()
            chan.send(Result(failure=Failure(FailureStage.INFRA_ERROR, log)).to_dict())
