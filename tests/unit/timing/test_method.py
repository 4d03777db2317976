"""The timing methods behind one interface (musaenv.timing.method): what each estimates, checks and keys by."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from musaenv.config import TimingConfig
from musaenv.timing.method import METHODS, Estimate, PairedTiming, SeparateTiming, timing_method
from musaenv.timing.paired import PairedSamples
from musaenv.types import TimingStats


def _paired(cand_own: float = 1.9, n: int = 8) -> PairedSamples:
    ref = [4.0 + 0.1 * i for i in range(n)]
    return PairedSamples(
        ref_ms=ref, cand_ms=[2.0] * n, ref_own_ms=[r - 0.05 for r in ref], cand_own_ms=[cand_own] * n,
        ref_first=[i % 2 == 0 for i in range(n)], clock="cpu", ref_out_ms=[3.0] * n, cand_out_ms=[3.0] * n,
    )  # fmt: skip


def test_every_mode_the_config_accepts_is_a_method_and_each_keys_apart():
    for mode in METHODS:
        assert TimingConfig(reference=mode).reference == mode
    with pytest.raises(ValueError):
        TimingConfig(reference="guess")
    keys = {m.key for m in METHODS.values()}
    assert len(keys) == len(METHODS) and all(m.version in m.key for m in METHODS.values())
    assert [m.name for m in METHODS.values() if m.gated] == ["paired"]
    assert [m.name for m in METHODS.values() if m.caches_reference] == ["dedicated_host"]


def test_paired_timing_estimates_the_median_ratio_with_its_interval():
    p = _paired()
    est = PairedTiming().estimate([99.0] * 8, None, p, None)  # the worker's own samples do not enter it
    assert est is not None and est.pairs == 8
    assert est.speedup == pytest.approx(statistics.median(r / 2.0 for r in p.ref_ms))
    assert est.low is not None and est.high is not None and est.low <= est.speedup <= est.high
    assert est.cand.median_ms == 2.0 and est.ref is not None and est.ref.n == 8
    assert PairedTiming().estimate([2.0] * 8, None, None, None) is None  # nothing the parent clocked


def test_separate_timing_is_the_ratio_of_medians_without_an_interval():
    ref = TimingStats.from_samples([6.0, 6.0, 6.0])
    est = timing_method("dedicated_host").estimate([2.0, 3.0, 4.0], ref, None, None)
    assert est is not None and est.speedup == 2.0 and est.low is None and est.pairs == 0
    no_ref = timing_method("every").estimate([2.0, 3.0], None, None, None)
    assert no_ref is not None and no_ref.speedup is None and no_ref.cand.median_ms == 2.5
    assert SeparateTiming("every", False).estimate([], ref, None, None) is None


def test_a_cap_lowers_the_speedup_and_scales_its_interval_never_raises_it():
    stats = TimingStats.from_samples([1.0])
    est = Estimate(stats, stats, 4.0, 3.0, 5.0, 10)
    capped = est.capped(2.0)
    assert (capped.speedup, capped.low, capped.high) == (2.0, 1.5, 2.5)
    assert est.capped(8.0) is est and est.capped(None) is est


def test_paired_findings_flag_forged_samples_with_their_evidence():
    honest = PairedTiming().findings(_paired(cand_own=1.9))
    assert honest.flags == () and honest.extra == {}
    forged = PairedTiming().findings(_paired(cand_own=0.01))
    assert forged.flags == ("timing_forged",) and "timing_forged" in forged.extra
    assert SeparateTiming("dedicated_host", True).findings(_paired(cand_own=0.01)).flags == ()


def test_a_new_method_version_re_measures_the_cached_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from musaenv.config import EvalConfig
    from musaenv.evaluator.plan import make_plan
    from musaenv.evaluator.reference import ReferenceService
    from musaenv.tasks.builtin import get_task

    task = get_task("l1_relu")
    config_timing = TimingConfig(reference="dedicated_host")
    service = ReferenceService("cpu", 1, config_timing, tmp_path)
    plan = make_plan(task, "cpu", EvalConfig(), 0)
    before = service.times.key(task, plan)
    monkeypatch.setattr(SeparateTiming, "version", "median-2")
    assert service.times.key(task, plan) != before
