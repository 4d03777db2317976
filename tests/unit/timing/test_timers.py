"""The timing loop and output fingerprints (musaenv.timing.timers), run for real on the CPU."""

from __future__ import annotations

import gc
import math
from typing import Any

import pytest
import torch

from musaenv.timing.timers import (
    FINGERPRINT_BLOCKS,
    DeviceClock,
    clone_args,
    output_fingerprint,
    output_read,
    read_fingerprint,
    time_forward,
    time_gated,
)


class _Recorder:
    """A forward that records which input each call saw (by its first value) and whether it was a fresh copy."""

    def __init__(self, originals: list[list[Any]]) -> None:
        self.seen: list[int] = []
        self.fresh: list[bool] = []
        self.ptrs = {a[0].data_ptr() for a in originals}

    def __call__(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        self.seen.append(int(x[0]))
        self.fresh.append(x.data_ptr() not in self.ptrs)
        x.mul_(0)  # a candidate that writes its input must not change the next call's
        return x + scale


def _inputs(n: int) -> list[list[Any]]:
    return [[torch.full((8,), float(i)), 2.0] for i in range(n)]


def test_calls_use_fresh_clones_warmup_from_the_other_end() -> None:
    inputs = _inputs(4)
    fn = _Recorder(inputs)
    run = time_forward(fn, inputs, DeviceClock("cpu"), warmup=2, repeats=6, max_time_s=60, flush_bytes=1024)
    assert fn.seen == [3, 2, 0, 1, 2, 3, 0, 1]  # warm-up inputs[-1], inputs[-2]; timed calls i % 4
    assert all(fn.fresh) and all(bool((a[0] == i).all()) for i, a in enumerate(inputs))  # originals intact
    assert len(run.samples_ms) == len(run.host_samples_ms) == len(run.fingerprints) == 6
    assert run.samples_ms == run.host_samples_ms and all(s >= 0 for s in run.samples_ms)  # CPU: host time


def test_kept_outputs_and_the_last_call_are_returned() -> None:
    inputs = _inputs(3)
    run = time_forward(_Recorder(inputs), inputs, DeviceClock("cpu"), warmup=0, repeats=5, max_time_s=60,
                       flush_bytes=0, keep=(1,))  # fmt: skip
    assert sorted(run.kept_outputs) == [1, 4]
    assert torch.equal(run.kept_outputs[1], torch.full((8,), 2.0))


def test_at_least_three_calls_when_time_runs_out_and_kept_calls_are_waited_for() -> None:
    inputs = _inputs(2)
    short = time_forward(_Recorder(inputs), inputs, DeviceClock("cpu"), warmup=0, repeats=50, max_time_s=0.0,
                         flush_bytes=0)  # fmt: skip
    assert len(short.samples_ms) == 3
    waits = time_forward(_Recorder(inputs), inputs, DeviceClock("cpu"), warmup=0, repeats=50, max_time_s=0.0,
                         flush_bytes=0, keep=(7,))  # fmt: skip
    assert len(waits.samples_ms) == 8 and 7 in waits.kept_outputs


def test_fingerprint_blocks_sums_and_the_reference_form() -> None:
    n = FINGERPRINT_BLOCKS * 2 + 3
    x = torch.arange(n, dtype=torch.float32)
    (rows,) = output_fingerprint(x)
    assert len(rows) == FINGERPRINT_BLOCKS + 1  # equal blocks, then the remainder
    assert rows[0] == [1.0, 1.0] and rows[-1] == pytest.approx(
        [sum(range(n - 3, n)), sum(i * i for i in range(n - 3, n))]
    )
    (ref,) = output_fingerprint(-x, reference=True)
    assert ref[1] == [-5.0, 13.0, 5.0, 2.0] and ref[-1][3] == 3.0  # sum, squares, |x|, count
    assert sum(r[0] for r in rows) == pytest.approx(n * (n - 1) / 2)


def test_fingerprint_of_tuples_integers_half_and_complex() -> None:
    half = torch.full((4096,), 60.0, dtype=torch.float16)  # sums past fp16's 65504 must stay finite
    prints = output_fingerprint((torch.tensor([1, 2], dtype=torch.int64), "not a tensor", half,
                                 torch.tensor([1 + 2j], dtype=torch.complex64)))  # fmt: skip
    assert len(prints) == 3
    assert prints[0] == [[1.0, 1.0], [2.0, 4.0]]
    assert sum(r[0] for r in prints[1]) == pytest.approx(60.0 * 4096)
    assert prints[2] == [[1.0, 1.0], [2.0, 4.0]]  # real and imaginary parts as elements


def test_fingerprint_falls_back_to_float64_where_float32_squares_overflow() -> None:
    (rows,) = output_fingerprint(torch.full((2,), 1e20, dtype=torch.float32))
    assert all(math.isfinite(v) for r in rows for v in r) and rows[0][1] == pytest.approx(1e40, rel=1e-6)


def test_an_output_changed_after_its_read_has_no_fingerprint() -> None:
    """The window reads every element (its block sums); the rest of the fingerprint comes after the clock stopped.
    An output written after that read (a thread finishing the work outside the window) fingerprints as NaN,
    which agrees with no reference; one left alone fingerprints as if taken at once."""
    x = torch.randn(FINGERPRINT_BLOCKS * 50 + 7)
    read = output_read(x)
    assert read_fingerprint(read, reference=True) == output_fingerprint(x, reference=True)
    x[123] += 1.0  # written after the read
    (rows,) = read_fingerprint(read)
    assert all(math.isnan(v) for row in rows for v in row)


class _Gate:
    """The parent's side of :func:`time_gated` for ``calls`` calls on the pool's inputs, logging each word."""

    def __init__(self, calls: int, events: list[str]) -> None:
        self.calls, self.events = calls, events

    def prepare(self, index: int) -> int | None:
        self.events.append("prepare")
        return -1 if index < self.calls else None

    def ready(self, index: int) -> None:
        self.events.append("ready")

    def done(self, index: int, ms: float) -> None:
        self.events.append("done")


def test_gated_fingerprints_are_taken_after_the_parent_s_next_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing but the call and the read runs between ``ready`` and ``done``; each call's fingerprint is finished
    only once the parent's next word has come (its CPU reading of the window is done by then)."""
    import musaenv.timing.timers as timers

    events: list[str] = []
    real = timers.read_fingerprint

    def logged(read: Any, reference: bool = False) -> Any:
        events.append("print")
        return real(read, reference)

    monkeypatch.setattr(timers, "read_fingerprint", logged)
    inputs = [[torch.randn(256)]]
    run = time_gated(torch.relu, inputs, DeviceClock("cpu"), _Gate(3, events), warmup=0, repeats=3, flush_bytes=0)
    assert len(run.fingerprints) == 3 and len(run.samples_ms) == 3
    assert events == ["prepare", "ready", "done"] + ["prepare", "print", "ready", "done"] * 2 + ["prepare", "print"]
    want = output_fingerprint(torch.relu(inputs[0][0]), reference=True)
    assert run.fingerprints[0] == [[row[:2] for row in rows] for rows in want]


def test_clone_args_copies_tensors_only_and_cpu_has_no_events() -> None:
    t, other = torch.ones(3), object()
    a, b = clone_args([t, other])
    assert torch.equal(a, t) and a.data_ptr() != t.data_ptr() and b is other
    assert DeviceClock("cpu").events() is None


def test_gated_calls_free_the_previous_call_before_drawing_and_keep_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call's inputs are drawn once the previous call's inputs and output are gone (so they reuse those pages
    instead of faulting fresh ones inside the window), and a kept output is a copy (it pins no page a later call's
    output would have reused), made only after the parent's next word (the parent reads the worker's CPU clock for
    the window once the worker waits: a copy right after ``done`` would land in the window)."""
    import weakref

    import musaenv.timing.timers as timers

    events: list[str] = []
    real_copy = timers._kept_copy
    monkeypatch.setattr(timers, "_kept_copy", lambda out: events.append("copy") or real_copy(out))

    alive: list[weakref.ref[torch.Tensor]] = []
    pointers: list[int] = []

    def draw(seed: int) -> list[torch.Tensor]:
        assert all(r() is None for r in alive), "the previous call's tensors were alive while the next was drawn"
        x = torch.full((64,), float(seed))
        alive.append(weakref.ref(x))
        return [x]

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x + 1.0
        alive.append(weakref.ref(y))
        pointers.append(y.data_ptr())
        return y

    class Seeds(_Gate):
        def prepare(self, index: int) -> int | None:
            super().prepare(index)
            return index + 10 if index < self.calls else None

    run = time_gated(fn, [], DeviceClock("cpu"), Seeds(4, events), warmup=0, repeats=4, flush_bytes=0, keep=[1],
                     draw=draw)  # fmt: skip
    assert events == ["prepare", "ready", "done"] * 2 + ["prepare", "copy", "ready", "done"] * 1 + ["prepare",
                      "ready", "done", "prepare"]  # fmt: skip
    assert len(run.samples_ms) == 4 and sorted(run.kept_outputs) == [1, 3]
    assert torch.equal(run.kept_outputs[1], torch.full((64,), 12.0))
    assert run.kept_outputs[1].data_ptr() != pointers[1]  # a copy (the original was freed before call 2 was drawn)


class _CollectorGate(_Gate):
    """A :class:`_Gate` that logs, at each word, whether the garbage collector is on."""

    def prepare(self, index: int) -> int | None:
        self.events.append(f"prepare gc={gc.isenabled()}")
        return index if index < self.calls else None

    def ready(self, index: int) -> None:
        self.events.append(f"ready gc={gc.isenabled()}")


def test_no_collection_from_a_draw_until_the_parent_s_next_word() -> None:
    """A collection between a call's draw and its window would run a candidate's finalisers with the inputs drawn
    and no clock running (found from outside: a finaliser that armed a profile hook caught the drawn inputs and
    did half the call for free). The collector is off from the draw to the parent's next word, on again after."""
    events: list[str] = []

    def draw(seed: int) -> list[Any]:
        events.append(f"draw gc={gc.isenabled()}")
        return [torch.full((4,), float(seed))]

    def fn(x: torch.Tensor) -> torch.Tensor:
        events.append(f"call gc={gc.isenabled()}")
        return x + 1

    assert gc.isenabled()
    gate = _CollectorGate(2, events)
    time_gated(fn, [], DeviceClock("cpu"), gate, warmup=0, repeats=2, flush_bytes=64, draw=draw)
    assert gc.isenabled()
    on, off = "gc=True", "gc=False"
    call = [f"draw {off}", f"ready {off}", f"call {off}", "done"]
    assert events == [f"prepare {on}", *call, f"prepare {off}", *call, f"prepare {off}"]

    def broken(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("a call that fails")

    with pytest.raises(ValueError):
        time_gated(broken, [], DeviceClock("cpu"), _CollectorGate(2, []), warmup=0, repeats=2, flush_bytes=0, draw=draw)
    assert gc.isenabled()  # restored on the way out


def test_a_collector_the_candidate_turned_off_stays_off() -> None:
    gc.disable()
    try:
        time_gated(torch.relu, [[torch.ones(4)]], DeviceClock("cpu"), _Gate(2, []), warmup=0, repeats=2, flush_bytes=0)
        assert not gc.isenabled()
    finally:
        gc.enable()
