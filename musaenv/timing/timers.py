"""Time a model's forward the same way for reference and candidate (runs inside a worker; imports torch).

Protocol (after triton.testing.do_bench and KernelBench): warm-up calls, then timed calls, each on a
fresh clone of a distinct pre-generated input (a cache keyed on pointers or contents gains nothing), with a
buffer larger than the last-level cache overwritten before each call and the device synchronised before
the clock starts and before it stops. The median is the statistic that speedups use.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

__all__ = [
    "FINGERPRINT_BLOCKS",
    "CallGate",
    "DeviceClock",
    "TimedRun",
    "clone_args",
    "output_fingerprint",
    "output_read",
    "read_fingerprint",
    "time_forward",
    "time_gated",
]


def clone_args(args: Sequence[Any]) -> list[Any]:
    """Fresh copies of tensor arguments (fresh allocation, same values); other values pass through."""
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


class DeviceClock:
    """Synchronise and read the clock for one device type (``cpu``, ``cuda``, ``musa``)."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self._sync: Callable[[], None] = lambda: None
        if self.device.type == "cuda":
            self._sync = torch.cuda.synchronize
        elif self.device.type == "musa":  # torch_musa registers torch.musa
            self._sync = torch.musa.synchronize  # type: ignore[attr-defined]

    def sync(self) -> None:
        """Wait for all queued device work."""
        self._sync()

    def events(self) -> tuple[Any, Any] | None:
        """A (start, end) event pair for device-side timing, or ``None`` on the CPU."""
        if self.device.type == "cuda":
            return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if self.device.type == "musa":
            ev = torch.musa.Event  # type: ignore[attr-defined]
            return ev(enable_timing=True), ev(enable_timing=True)
        return None


@dataclass
class TimedRun:
    """Raw result of :func:`time_forward`.

    Attributes:
        samples_ms: Per-call times (device events on GPUs, host time around synchronised calls on the CPU).
        host_samples_ms: Synchronised host wall time per call (cross-checks device events against side streams).
        kept_outputs: Outputs of the calls whose index was asked for (for a correctness recheck).
        fingerprints: Per timed call, :func:`output_fingerprint` of its output (taken after the call's clock
            stopped), so the parent can check calls it picks only after the run.
    """

    samples_ms: list[float]
    host_samples_ms: list[float]
    kept_outputs: dict[int, Any]
    fingerprints: list[list[list[list[float]]]] = field(default_factory=list)


# Blocks per output fingerprint. One sum over a whole output is too coarse: the tolerance bound grows with the
# element count n while a stale output's sum drifts only with sqrt(n), so a relu of another random input of
# 262,144 elements passed a whole-output probe 2 of 200 times (by the same arithmetic, a quarter of the time or
# more at 16M elements). Per block of n/64 elements the bound shrinks 64-fold but the drift only 8-fold, and
# every block must pass.
FINGERPRINT_BLOCKS = 64


def output_fingerprint(out: Any, reference: bool = False) -> list[list[list[float]]]:
    """Per tensor in ``out`` (a tensor, or a tuple/list of them), per block of its flattened elements:
    ``[sum, sum of squares]``; ``reference``: ``[sum, sum of squares, sum of absolute values, count]``, which
    bound any output within tolerance of this one (:func:`musaenv.verification.compare.fingerprints_agree`).

    Blocks: :data:`FINGERPRINT_BLOCKS` equal runs, plus the remainder as one more. Accumulated in float32 at
    least (half-precision sums overflow at 65504: an honest fp16 output summing past it was refused as a timing
    cheat) with torch's pairwise sum (``linalg.vector_norm`` in float32 was off by 5e-5 relative on 2M elements,
    more than the check's slack); in float64 again where float32 overflows.
    """
    return read_fingerprint(output_read(out), reference)


OutputRead = list[tuple[torch.Tensor, list[torch.Tensor]]]
"""Per output tensor: its elements flattened (float32 at least) and the block sums read from them."""


def output_read(out: Any) -> OutputRead:
    """The part of :func:`output_fingerprint` that must happen inside a timed window: every element of every output
    tensor read once (the per-block sums, float32 at least), so that no work hides in lazily computed pages or in
    a thread still writing. The rest (squares, absolute values) is :func:`read_fingerprint`'s, after the clock
    stopped: paid inside the window it was 1.6 ms on a 2M-element output beside a 0.3 ms ReLU, and it was added to
    both sides of every pair, pulling every speedup towards 1."""
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    read: OutputRead = []
    for t in items:
        if type(t) is not torch.Tensor:
            continue
        x = t.detach()
        x = torch.view_as_real(x) if x.is_complex() else x
        if not x.is_floating_point():
            x = x.double()
        elif x.element_size() < 4:
            x = x.float()
        flat = x.reshape(-1)
        read.append((flat, [piece.sum(dim=1) for piece in _pieces(flat)]))
    return read


def read_fingerprint(read: OutputRead, reference: bool = False) -> list[list[list[float]]]:
    """:func:`output_fingerprint` of what :func:`output_read` read. The block sums are taken again first and must
    be the same bits: an output that changed after it was read (outside the window that paid for it) gets NaN
    rows, which agree with no reference."""
    prints = []
    for flat, sums_read in read:
        rows = _block_stats(flat, reference)
        if not all(_same_bits(piece.sum(dim=1), s) for piece, s in zip(_pieces(flat), sums_read, strict=True)):
            rows = [[float("nan")] * len(row) for row in rows]
        prints.append(rows)
    return prints


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def _pieces(flat: torch.Tensor) -> list[torch.Tensor]:
    n = flat.numel()
    blocks = max(1, min(FINGERPRINT_BLOCKS, n))
    per = n // blocks
    pieces = [flat[: blocks * per].view(blocks, per)]
    if n > blocks * per:
        pieces.append(flat[blocks * per :].view(1, -1))
    return pieces


def _block_stats(flat: torch.Tensor, reference: bool) -> list[list[float]]:
    rows: list[list[float]] = []
    for piece in _pieces(flat):
        sums, squares = piece.sum(dim=1), (piece * piece).sum(dim=1)
        if piece.dtype != torch.float64 and not bool(torch.isfinite(sums).all() and torch.isfinite(squares).all()):
            piece = piece.double()  # squares of finite float32 values past 1.8e19 overflow: exact in float64
            sums, squares = piece.sum(dim=1), (piece * piece).sum(dim=1)
        if reference:
            stats = torch.stack([sums, squares, piece.abs().sum(dim=1)], dim=1).tolist()
            rows += [[*row, float(piece.shape[1])] for row in stats]
        else:
            rows += torch.stack([sums, squares], dim=1).tolist()
    return rows


class CallGate(Protocol):
    """The parent's hand on each timed call in paired timing (:func:`time_gated`; musaenv.evaluator.pairing)."""

    def prepare(self, index: int) -> int | None:
        """Wait for the parent: the seed of call ``index``'s inputs to prepare it now (``-1``: from the pool), or
        ``None`` to stop."""
        ...

    def ready(self, index: int) -> None:
        """Say call ``index`` is prepared and wait for the parent's word to run it."""
        ...

    def done(self, index: int, ms: float) -> None:
        """Say call ``index`` is done (its output read in full); ``ms`` is this process's own measure of it."""
        ...


def _flush_buffer(clock: DeviceClock, flush_bytes: int, touch: bool = False) -> torch.Tensor | None:
    """The eviction buffer; ``touch``: its pages faulted in now, not in the first call's prepare."""
    buf = torch.empty(max(flush_bytes // 4, 1), dtype=torch.float32, device=clock.device) if flush_bytes else None
    if buf is not None and touch:
        buf.fill_(0.0)
    return buf


def time_gated(
    fn: Callable[..., Any],
    inputs: Sequence[Sequence[Any]],
    clock: DeviceClock,
    gate: CallGate,
    *,
    warmup: int,
    repeats: int,
    flush_bytes: int,
    keep: Sequence[int] = (),
    reference: bool = False,
    draw: Callable[[int], Sequence[Any]] | None = None,
    warmup_seeds: Sequence[int] = (),
) -> TimedRun:
    """Like :func:`time_forward`, but each timed call waits for the parent (``gate``), which times it with its own
    clock: fresh inputs and cache flush before :meth:`CallGate.ready`, then call, synchronise and every element of
    the output read (:func:`output_read`: no work hides in lazily computed pages) before :meth:`CallGate.done`. The
    parent decides how many calls run (at most ``repeats``) and ends them with the word :meth:`CallGate.prepare`
    returns None on, after the last call too: until then the worker waits (its CPU clock is read then), and only
    after that word does it finish the fingerprint of the call before (:func:`_finish_print`).

    ``draw`` (seed -> fresh inputs): a call whose seed the parent sends is drawn when prepared, the warm-up calls
    run on clones of one input drawn from ``warmup_seeds[0]`` (``inputs`` may be empty): no timed input exists
    before its call does.

    The garbage collector is off from each call's draw until the parent's next word (:func:`_collector_held`): a
    collection there would run the finalisers of a candidate's garbage with the call's inputs drawn and the clock
    not started, work no window pays for. It runs again only after the parent has read this worker's clock."""
    flush = _flush_buffer(clock, flush_bytes, touch=reference)  # the reference's warm-up runs ahead of the pairing
    _warm_up(fn, warmup, inputs, draw(warmup_seeds[0]) if draw is not None and warmup and warmup_seeds else None)
    clock.sync()
    run, out, read = TimedRun([], [], {}), None, None
    with _collector_held() as hold:
        for i in range(repeats + 1):  # after its last call too, the worker waits for the parent's word to end
            seed = gate.prepare(i)
            hold.release()  # the parent has read this worker's clock: a collection here is nobody's window
            _finish_print(run, read, reference)  # the previous call's, now that the parent read this worker's clock
            if i - 1 in keep:  # copied now too (not in the window): the next call's output reuses the original's pages
                run.kept_outputs[i - 1] = out if seed is None else _kept_copy(out)
            read = None
            if seed is None:
                break
            args = out = None  # the previous call's freed first: this call's inputs and output reuse the same pages
            hold.hold()
            args = _gated_args(i, seed, repeats, inputs, draw)
            out, read = _gated_call(fn, args, flush, clock, gate, i, run)
    _finish_print(run, read, reference)  # the parent's word to prepare a call was not read: it ended otherwise
    if run.samples_ms:
        run.kept_outputs.setdefault(len(run.samples_ms) - 1, out)
    return run


def _gated_call(
    fn: Callable[..., Any],
    args: Sequence[Any],
    flush: torch.Tensor | None,
    clock: DeviceClock,
    gate: CallGate,
    i: int,
    run: TimedRun,
) -> tuple[Any, OutputRead]:
    """Timed call ``i`` on ``args``: cache flushed, the parent told it is ready, the window (call, synchronise,
    every output element read) closed by :meth:`CallGate.done`; returns the output and its read."""
    if flush is not None:
        flush.fill_(float(i))
    clock.sync()
    gate.ready(i)
    events = clock.events()
    t0 = time.perf_counter_ns()
    if events is not None:
        events[0].record()
    out = fn(*args)
    if events is not None:
        events[1].record()
    read = output_read(out)  # every element read inside the window (the rest of its fingerprint after it)
    clock.sync()
    t1 = time.perf_counter_ns()
    gate.done(i, (t1 - t0) / 1e6)
    run.host_samples_ms.append((t1 - t0) / 1e6)
    run.samples_ms.append(events[0].elapsed_time(events[1]) if events is not None else run.host_samples_ms[-1])
    return out, read


class _CollectorHold:
    """Turns the garbage collector off (:meth:`hold`) and back on (:meth:`release`) when it was on at the start."""

    def __init__(self) -> None:
        self.was_on = gc.isenabled()

    def hold(self) -> None:
        gc.disable()

    def release(self) -> None:
        if self.was_on:
            gc.enable()


@contextlib.contextmanager
def _collector_held() -> Iterator[_CollectorHold]:
    """A :class:`_CollectorHold`, the collector's state restored on the way out (an exception included)."""
    hold = _CollectorHold()
    try:
        yield hold
    finally:
        hold.release()


def _kept_copy(out: Any) -> Any:
    """A kept timed output, its tensors copied (same values, fresh pages; a tuple or list keeps its type). Kept as
    it was, the output would pin its pages, and a later call's output would fault fresh ones inside its window."""
    if type(out) is torch.Tensor:
        return out.clone()
    if type(out) in (tuple, list):
        return type(out)(o.clone() if type(o) is torch.Tensor else o for o in out)
    return out


def _finish_print(run: TimedRun, read: OutputRead | None, reference: bool) -> None:
    """The fingerprint of the call whose output ``read`` read, taken outside every window: after the parent's
    next word, by which time it has read this worker's CPU clock for the window (a worker busy right after its
    answer would be caught in it). In the reference's form on both sides; the candidate's cut to ``[sum, sum^2]``."""
    if read is None:
        return
    full = read_fingerprint(read, reference=True)
    run.fingerprints.append(full if reference else [[row[:2] for row in rows] for rows in full])


def _warm_up(fn: Callable[..., Any], n: int, inputs: Sequence[Sequence[Any]], drawn: Sequence[Any] | None) -> None:
    """``n`` untimed calls, each on a clone of ``drawn`` (one draw: warm-up needs the program's paths warm, not new
    data) or, without it, of the pool's inputs from its end."""
    for i in range(n):
        fn(*clone_args(drawn if drawn is not None else inputs[-1 - i % len(inputs)]))


def _gated_args(i: int, seed: int, repeats: int, inputs: Sequence[Sequence[Any]], draw: Any) -> list[Any]:
    """Timed call ``i``'s inputs: drawn from ``seed``, or (``seed < 0``) a clone of the pool's."""
    if i == repeats:
        raise RuntimeError(f"the parent asked for timed call {i} of a plan of {repeats}")
    if seed >= 0 and draw is None:
        raise RuntimeError(f"timed call {i} came with a seed, and this worker cannot draw inputs")
    return list(draw(seed)) if seed >= 0 else clone_args(inputs[i % len(inputs)])


def time_forward(
    fn: Callable[..., Any],
    inputs: Sequence[Sequence[Any]],
    clock: DeviceClock,
    *,
    warmup: int,
    repeats: int,
    max_time_s: float,
    flush_bytes: int,
    keep: Sequence[int] = (),
    reference: bool = False,
) -> TimedRun:
    """Time ``fn`` on ``repeats`` calls; call ``i`` uses a clone of ``inputs[i % len(inputs)]``, warm-up call ``j``
    one of ``inputs[-1 - j % len(inputs)]`` (from the other end, so a timed call repeats a warm-up input only when
    the pool is too small for both; the parent counts first uses only, musaenv.evaluator.plan.first_use_calls).

    ``keep`` lists call indices whose outputs are returned for a recheck; the last call's output is returned too.
    Every call's output fingerprint is taken after its clock stopped (``reference``: the reference's form).
    At least 3 calls are timed even when ``max_time_s`` runs out earlier.
    """
    flush = _flush_buffer(clock, flush_bytes)
    for i in range(warmup):
        fn(*clone_args(inputs[-1 - i % len(inputs)]))
    clock.sync()
    samples: list[float] = []
    host: list[float] = []
    kept: dict[int, Any] = {}
    prints: list[list[list[list[float]]]] = []
    deadline = time.perf_counter() + max_time_s
    for i in range(repeats):
        args = clone_args(inputs[i % len(inputs)])
        if flush is not None:
            flush.fill_(float(i))  # overwrite a buffer larger than the last-level cache
        events = clock.events()
        clock.sync()
        t0 = time.perf_counter_ns()
        if events is not None:
            events[0].record()
        out = fn(*args)
        if events is not None:
            events[1].record()
        clock.sync()
        t1 = time.perf_counter_ns()
        host.append((t1 - t0) / 1e6)
        samples.append(events[0].elapsed_time(events[1]) if events is not None else host[-1])
        if i in keep:
            kept[i] = out
        prints.append(output_fingerprint(out, reference))
        if i >= 2 and time.perf_counter() > deadline and not any(k > i for k in keep):
            break
    if samples:
        kept.setdefault(len(samples) - 1, out)  # the last timed call is always rechecked (late cheats)
    return TimedRun(samples, host, kept, prints)
