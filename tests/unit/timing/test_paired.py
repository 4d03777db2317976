"""Paired timing: the median's interval, the cross-checks of the candidate's own samples, and the parent's
protocol (pairs counted, calls interleaved one at a time, order alternated, a forged own sample caught).

The protocol test runs the real worker side (:func:`time_gated` with :class:`ChannelGate`) and the real parent side
(:func:`pair_calls`) over real pipes, the two workers as threads; it asserts the machinery, never timings.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from musaenv.evaluator.pairing import RefSession, pair_calls
from musaenv.isolation.channel import Channel
from musaenv.isolation.limits import StageClock
from musaenv.isolation.messages import Result, TimeDone, TimeReady, Timing, decode
from musaenv.isolation.plans import TimingPlan
from musaenv.timing.paired import (
    PairedSamples,
    cost_extra,
    fault_extra,
    median_interval,
    outside_work,
    sample_mismatch,
    settled,
)
from musaenv.timing.timers import DeviceClock, time_gated
from musaenv.worker.trials import ChannelGate


def test_median_interval_uses_binomial_ranks() -> None:
    xs = [float(i) for i in range(1, 21)]  # n = 20: the 95 % interval is [x_(6), x_(15)]
    assert median_interval(xs) == (6.0, 15.0)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few for 95 %: the whole range


def test_median_interval_covers_the_median_at_least_95_percent() -> None:
    rng = random.Random(7)
    hits = 0
    for _ in range(2000):  # a skewed distribution with median 1.0 (log-normal)
        lo, hi = median_interval([rng.lognormvariate(0.0, 0.8) for _ in range(15)])
        hits += lo <= 1.0 <= hi
    assert hits / 2000 >= 0.94


def _samples(cand_own: list[float], clock: str = "cpu", cand_out: float = 3.0) -> PairedSamples:
    n = len(cand_own)
    return PairedSamples(
        ref_ms=[4.0] * n, cand_ms=[2.0] * n, ref_own_ms=[4.1] * n, cand_own_ms=cand_own, ref_first=[True] * n,
        clock=clock, ref_out_ms=[3.0] * n, cand_out_ms=[cand_out] * n,
    )  # fmt: skip


def test_speedup_is_the_median_of_pair_ratios_with_its_interval() -> None:
    p = PairedSamples([4.0, 6.0, 8.0], [2.0, 2.0, 2.0], [4.0] * 3, [2.0] * 3, [True, False, True])
    assert p.speedup() == (3.0, 2.0, 4.0)
    assert p.speedup([0]) == (2.0, 2.0, 2.0)


def test_honest_own_samples_pass_and_forged_ones_are_caught() -> None:
    assert sample_mismatch(_samples([2.1] * 10)) == ""
    assert sample_mismatch(_samples([2.1] * 10, clock="wall")) == ""
    forged = _samples([0.1] * 10)  # the candidate divided its samples by 20
    forged = PairedSamples(**{**forged.__dict__, "cand_ms": [20.0] * 10})
    assert "measured its timed calls" in sample_mismatch(forged)


def test_harness_overhead_the_reference_shows_is_not_taken_for_forgery() -> None:
    """On a busy host the harness's own CPU in each window (decoding, answering, a garbage collection) can exceed a
    short call; the trusted reference shows it on the same cores, so a 0.3 ms call is not a forged one, while a
    candidate whose measures are 200 times below its calls still is."""
    n, gap = 10, 1.5
    honest = PairedSamples(
        ref_ms=[4.0 + gap] * n, cand_ms=[0.3 + gap] * n, ref_own_ms=[4.0] * n, cand_own_ms=[0.3] * n,
        ref_first=[True] * n, clock="cpu",
    )  # fmt: skip
    assert sample_mismatch(honest) == ""
    forged = PairedSamples(**{**honest.__dict__, "cand_ms": [20.0 + gap] * n, "cand_own_ms": [0.1] * n})
    assert "measured its timed calls" in sample_mismatch(forged)


def test_work_moved_before_the_window_is_caught() -> None:
    assert outside_work(_samples([2.1] * 10)) == ""
    assert "more CPU than the reference" in outside_work(_samples([2.1] * 10, cand_out=12.0))
    assert outside_work(_samples([2.1] * 10, clock="wall", cand_out=12.0)) == ""  # no CPU clock: not judged


@dataclass
class _ThreadWorker:
    """A worker played by a thread of this process, on real pipes (what RefSession reads)."""

    chan: Channel
    pid: int = field(default_factory=os.getpid)

    def close(self) -> None:
        """Nothing to stop: the thread ends with its loop."""


class _ForgingGate(ChannelGate):
    """A candidate that rewrites its own samples twenty times smaller."""

    def done(self, index: int, ms: float) -> None:
        super().done(index, ms / 20)


def _frame_values() -> set[float]:
    """The first element of every tensor the callers' frames hold (directly or in a list): what a warm-up call
    that searches the timing loop's frame for its inputs would find."""
    found: set[float] = set()
    frame = sys._getframe(1)
    while frame is not None:
        for v in frame.f_locals.values():
            items = v if isinstance(v, (list, tuple)) else [v]
            for item in items:
                for t in item if isinstance(item, (list, tuple)) else [item]:
                    if isinstance(t, torch.Tensor) and t.numel():
                        found.add(float(t.reshape(-1)[0]))
        frame = frame.f_back
    return found


def _serve(
    chan: Channel,
    name: str,
    log: list[tuple[str, int]],
    forge: bool,
    repeats: int,
    seen: dict[str, Any] | None = None,
    sleep_s: Any = lambda call: 0.05,
) -> None:
    calls = iter(range(-1, repeats))  # -1: the warm-up call

    def model(x: torch.Tensor) -> torch.Tensor:
        call = next(calls)
        if call < 0:
            if seen is not None:
                seen[f"{name}_warmup_found"] = _frame_values()
            return x * 2
        log.append((name, call))
        if seen is not None:
            seen.setdefault(name, []).append(float(x[0]))
        time.sleep(sleep_s(call))  # 50 ms: long enough that a forged sample is far from the parent's window
        return x * 2

    def draw(seed: int) -> list[torch.Tensor]:
        return [torch.full((64,), float(seed), dtype=torch.float64)]

    gate = _ForgingGate(chan) if forge else ChannelGate(chan)
    run = time_gated(model, [], DeviceClock("cpu"), gate, warmup=1, repeats=repeats, flush_bytes=1024,
                     reference=True, draw=draw, warmup_seeds=[7], keep=[1])  # fmt: skip
    kept = sorted(run.kept_outputs)
    msg = Timing(run.samples_ms, run.host_samples_ms, kept, [1] * len(kept), fingerprints=run.fingerprints)
    chan.send(msg.to_dict(), [run.kept_outputs[i].numpy() for i in kept])
    if name == "ref":
        chan.send(Result().to_dict())


def _plan(repeats: int, max_time_s: float, keep: list[int] | None = None, **stop: Any) -> TimingPlan:
    return TimingPlan(
        seed=0, pool=1, warmup=0, repeats=repeats, max_time_s=max_time_s, flush_bytes=0, keep=keep or [], **stop
    )


def _pipes() -> tuple[Channel, Channel]:
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    return Channel(a_r, b_w), Channel(b_r, a_w)  # (parent's end, worker's end)


def _pair(forge: bool, repeats: int = 6) -> tuple[PairedSamples, list[tuple[str, int]], dict[str, Any]]:
    log: list[tuple[str, int]] = []
    (cp, cw), (rp, rw) = _pipes(), _pipes()
    leftover: dict[str, Any] = {}
    threads = [threading.Thread(target=_serve, args=(w, n, log, forge and n == "cand", repeats, leftover),
                                daemon=True)
               for w, n in ((cw, "cand"), (rw, "ref"))]  # fmt: skip
    for t in threads:
        t.start()

    def cand_recv() -> Any:
        msg, arrays = cp.recv()
        if msg["type"] in (TimeReady.TYPE, TimeDone.TYPE):
            return decode(msg, TimeReady, TimeDone)
        return msg, arrays

    ref = RefSession(_ThreadWorker(rp), StageClock(os.getpid(), 60.0))  # type: ignore[arg-type]
    timing = _plan(repeats=repeats, max_time_s=60.0)
    samples, handoff = pair_calls(cand_recv, cp.send, ref, timing)
    assert handoff is None
    leftover["timing"] = cp.recv()[0]  # the candidate's own timing message follows the pairs
    for t in threads:
        t.join(10)
    return samples, log, leftover


def test_pairs_are_counted_interleaved_and_alternated() -> None:
    samples, log, leftover = _pair(forge=False)
    assert samples.pairs == 6 and samples.clock == "wall"
    assert samples.ref_first == [True, False, True, False, True, False]
    # one call at a time, in the parent's order: reference first on even pairs, candidate first on odd ones
    expected = [(n, i) for i in range(6) for n in (("ref", "cand") if i % 2 == 0 else ("cand", "ref"))]
    assert log == expected
    speedup = samples.speedup()
    assert speedup is not None and speedup[1] <= speedup[0] <= speedup[2]
    assert all(ms >= 50.0 for ms in samples.cand_ms + samples.ref_ms)  # the parent's windows hold the calls
    assert leftover["timing"]["type"] == Timing.TYPE
    assert sample_mismatch(samples) == ""


def test_the_reference_kept_outputs_come_back_for_the_recheck() -> None:
    """The eager reference's kept timed outputs (call 1 and the last) reach the parent with its timing message,
    each the output on that pair's inputs: the recheck of the candidate's kept calls needs no second run."""
    samples, _, _ = _pair(forge=False)
    assert sorted(samples.ref_kept) == [1, 5]
    for call, arrays in samples.ref_kept.items():
        assert len(arrays) == 1 and np.array_equal(arrays[0], np.full(64, 2.0 * samples.seeds[call]))


def test_each_pair_draws_fresh_inputs_that_no_warm_up_can_find_ahead() -> None:
    samples, _, seen = _pair(forge=False)
    # one seed per pair, picked by the parent when the pair began: both workers drew the same inputs from it
    assert len(samples.seeds) == 6 and len(set(samples.seeds)) == 6
    assert seen["ref"] == seen["cand"] == [float(s) for s in samples.seeds]
    # the warm-up call searched its callers' frames: nothing of a timed call's inputs existed in the worker yet
    assert not seen["cand_warmup_found"] & set(seen["cand"])
    assert 7.0 in seen["cand_warmup_found"]  # (its own input was found: the search works)


def test_a_forged_own_sample_is_detected() -> None:
    samples, _, _ = _pair(forge=True)
    assert samples.pairs == 6
    assert "measured its timed calls" in sample_mismatch(samples)


def test_the_parent_stops_early_with_time_end() -> None:
    log: list[tuple[str, int]] = []
    (cp, cw), (rp, rw) = _pipes(), _pipes()
    for w, n in ((cw, "cand"), (rw, "ref")):
        threading.Thread(target=_serve, args=(w, n, log, False, 50), daemon=True).start()

    def cand_recv() -> Any:
        msg, arrays = cp.recv()
        return decode(msg, TimeReady, TimeDone) if msg["type"] in (TimeReady.TYPE, TimeDone.TYPE) else (msg, arrays)

    ref = RefSession(_ThreadWorker(rp), StageClock(os.getpid(), 60.0))  # type: ignore[arg-type]
    samples, handoff = pair_calls(cand_recv, cp.send, ref, _plan(repeats=50, max_time_s=0.001, keep=[4]))
    assert handoff is None
    assert samples.pairs == 5  # at least 3, and on to the kept call 4, then ended by the budget
    assert cp.recv()[0]["type"] == Timing.TYPE


def _pairs_until_settled(cand_sleep: Any, keep: list[int]) -> int:
    log: list[tuple[str, int]] = []
    (cp, cw), (rp, rw) = _pipes(), _pipes()
    for w, n in ((cw, "cand"), (rw, "ref")):
        sleep = cand_sleep if n == "cand" else (lambda call: 0.02)
        threading.Thread(target=_serve, args=(w, n, log, False, 12, None, sleep), daemon=True).start()

    def cand_recv() -> Any:
        msg, arrays = cp.recv()
        return decode(msg, TimeReady, TimeDone) if msg["type"] in (TimeReady.TYPE, TimeDone.TYPE) else (msg, arrays)

    ref = RefSession(_ThreadWorker(rp), StageClock(os.getpid(), 60.0))  # type: ignore[arg-type]
    plan = _plan(repeats=12, max_time_s=60.0, keep=keep, min_pairs=4, stop_width=0.5)
    samples, handoff = pair_calls(cand_recv, cp.send, ref, plan)
    assert handoff is None and cp.recv()[0]["type"] == Timing.TYPE
    return samples.pairs


def test_a_steady_speedup_stops_after_min_pairs_at_an_even_count_past_the_kept_calls() -> None:
    assert _pairs_until_settled(lambda call: 0.02, keep=[]) == 4  # ratios ~1: the interval is narrow at once
    assert _pairs_until_settled(lambda call: 0.02, keep=[4]) == 6  # on past kept call 4, to an even count


def test_a_noisy_speedup_runs_every_pair() -> None:
    # calls of 2 ms and 60 ms in turn: the ratios stay 30x apart, the interval never narrows to width 0.5
    assert _pairs_until_settled(lambda call: 0.002 if call % 2 else 0.06, keep=[]) == 12


def test_settled_reads_the_spread_of_the_ratios_never_their_level() -> None:
    steady = [1.0, 1.02, 0.99, 1.01, 1.0, 0.98]
    assert settled([10 * x for x in steady], [1.0] * 6, 0.05)  # a 10x speedup, known to 2 %
    assert settled([0.1 * x for x in steady], [1.0] * 6, 0.05)  # a 10x slowdown, the same spread
    assert not settled([1.0, 2.0, 0.5, 1.0, 3.0, 0.4], [1.0] * 6, 0.05)
    assert not settled(steady, [1.0] * 6, 0.0)  # 0: never stop early
    assert not settled(steady, [1.0, 1.0, 0.0, 1.0, 1.0, 1.0], 0.05)  # a call measured as 0: not known
    assert not settled([1.0, 1.0], [1.0, 1.0], 0.05)


def test_paired_is_the_default_and_the_cached_mode_is_named_for_its_host() -> None:
    from musaenv.config import TimingConfig
    from musaenv.errors import ConfigError

    assert TimingConfig().reference == "paired"
    assert TimingConfig(reference="cached").reference == "dedicated_host"  # its former name still reads
    with pytest.raises(ConfigError):
        TimingConfig(reference="sometimes")


def test_pairs_a_major_fault_struck_are_left_out_while_enough_remain() -> None:
    """A window that waited on a page read back from disk is the host's doing: that pair leaves the median, unless
    fewer than half of the pairs (or 3) would remain, so a program that faults in every window is measured as is."""
    ref, cand = [2.0] * 8, [2.0] * 8
    cand[1] = cand[5] = 40.0  # the two windows the faults struck
    faults = [(10, 0)] * 8
    hit = [(10, 0), (900, 3), (10, 0), (10, 0), (10, 0), (12, 1), (10, 0), (10, 0)]
    p = PairedSamples(ref, cand, ref, cand, [True] * 8, ref_faults=faults, cand_faults=hit)
    assert p.faulted() == [1, 5] and p.counted() == [0, 2, 3, 4, 6, 7]
    assert p.speedup() == (1.0, 1.0, 1.0)
    assert fault_extra(p) == {"timing_faults": {"minor_median": {"reference": 10.0, "candidate": 10.0},
                                                "major_pairs": [1, 5], "left_out": [1, 5]}}  # fmt: skip
    everywhere = PairedSamples(ref, cand, ref, cand, [True] * 8, ref_faults=faults, cand_faults=[(1, 1)] * 8)
    assert everywhere.counted() == list(range(8)) and everywhere.speedup() is not None
    assert everywhere.speedup()[0] == 1.0  # six of eight pairs at 1.0: the median as measured
    assert fault_extra(everywhere)["timing_faults"]["left_out"] == []  # type: ignore[index]
    assert p.counted([0, 1, 2]) == [0, 1, 2] and p.counted([0, 1, 2, 3, 4, 5]) == [0, 2, 3, 4]  # 3 at least
    assert fault_extra(PairedSamples(ref, cand, ref, cand, [True] * 8)) == {}  # the wall clock: not read


def test_page_faults_counts_a_page_read_back_from_disk(tmp_path: Any) -> None:
    """The parent's reading of a worker's faults: a page dropped from the page cache and read again through a
    mapping is a major fault of the reading process."""
    import mmap

    from musaenv.evaluator.cpu_watch import page_faults

    path = tmp_path / "pages"
    path.write_bytes(os.urandom(1 << 20))
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages: dropped from the cache
        before = page_faults(os.getpid())
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            total = sum(m[i] for i in range(0, len(m), 4096))
        after = page_faults(os.getpid())
    assert total >= 0 and after[1] > before[1] and after[0] >= before[0]
    assert page_faults(2**22 + 12345) == (0, 0)  # no such process


def test_cost_extra_splits_the_pairing_per_side_and_subtracts_the_workers_own_call() -> None:
    """Prepares and windows are summed per side; the handshake is each window less the worker's own measure."""
    p = PairedSamples(
        [1.0, 1.0], [2.0, 2.0], [1.0, 1.0], [2.0, 2.5], [True, False],
        ref_prep_ms=[10.0, 12.0], cand_prep_ms=[11.0, 13.0], ref_wall_ms=[1.5, 1.25], cand_wall_ms=[2.5, 2.0],
    )  # fmt: skip
    got = cost_extra(p)["timing_cost"]
    assert got == {
        "calls": 2,
        "reference": {"prepare": 22.0, "window": 2.8, "handshake": 0.8},
        "candidate": {"prepare": 24.0, "window": 4.5, "handshake": 0.5},  # a window under its own measure: 0
    }
    assert cost_extra(PairedSamples([1.0], [1.0], [1.0], [1.0], [True])) == {}  # not recorded: nothing claimed
