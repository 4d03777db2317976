"""Each build's record in EvalResult.extra["builds"] is the parent's (tier, time, cached, declined paths), and the
result's build_tier sums them up; both survive the JSON round trip that recording, Ray and bench rows take."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from musaenv.config import EvalConfig
from musaenv.evaluator import candidate
from musaenv.evaluator.candidate import MAX_RECORDS, CandidateRun, _handle, _record, _serve_build
from musaenv.evaluator.verdict import base_result
from musaenv.isolation.channel import Channel
from musaenv.isolation.messages import BuildRequest, Result
from musaenv.toolchains.loader import BuildOutcome
from musaenv.types import BuildRecord, EvalResult, Stage, build_tier_of

_WHY = [{"tier": "split", "why": "the source uses Python or pybind11 ('py::')"}]


def test_a_served_build_is_recorded_with_its_tier_and_why_faster_ones_did_not_apply() -> None:
    outcome = BuildOutcome(True, "musaenv_a", "/x.so", seconds=12.5, extra={"tier": "pch", "declined": _WHY})
    assert _record(outcome) == BuildRecord("musaenv_a", True, 12.5, False, tier="pch", declined=tuple(_WHY))
    assert _record(BuildOutcome(False, "musaenv_b", log="refused")).tier is None  # no path ran


def test_the_parent_records_each_different_build_it_serves_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_build(spec: Any, timeout_s: float) -> BuildOutcome:
        return BuildOutcome(True, spec.name, "/nowhere.so", seconds=2.0, extra={"tier": "split", "declined": []})

    monkeypatch.setattr(candidate, "build_extension", fake_build)
    parent, (cr, cw) = Channel.pair()
    worker, run = SimpleNamespace(chan=parent), CandidateRun()
    for spec in ({"cpp_sources": ["int f() { return 1; }"], "functions": ["f"]},) * 2 + (
        {"cpp_sources": ["int g() { return 2; }"], "functions": ["g"], "extra_cflags": ["-fplugin=x.so"]},
    ):
        _serve_build(worker, BuildRequest(spec), run, EvalConfig(), "cpu", False, 5.0)
        Channel(cr, cw).recv()
    assert [(b.tier, b.ok, b.cached) for b in run.builds] == [("split", True, False), (None, False, False)]
    for _ in range(MAX_RECORDS + 5):  # a worker flooding refused requests: the parent's list stays bounded
        _serve_build(worker, BuildRequest({"cpp_sources": 5}), run, EvalConfig(), "cpu", False, 5.0)
        Channel(cr, cw).recv()
    assert len(run.builds) == MAX_RECORDS


def test_the_worker_adds_only_its_cupy_kernels_to_the_builds_the_parent_served() -> None:
    run = CandidateRun(builds=[_record(BuildOutcome(True, "musaenv_a", "/x.so", seconds=3.0, extra={"tier": "split"}))])
    forged = BuildRecord("musaenv_a", True, 0.0, True, tier="torch")
    cupy = BuildRecord("RawKernel k", True, 0.5, False, tier="nvrtc", kind="cupy")
    assert _handle(Result(builds=[forged, cupy]), [], run)
    assert [(b.name, b.tier) for b in run.builds] == [("musaenv_a", "split"), ("RawKernel k", "nvrtc")]
    assert run.compile_time_s == 0.5  # the worker's own compile; the served build's time is counted when served


def test_build_tier_is_the_one_path_or_mixed() -> None:
    assert build_tier_of([]) is None
    split, torch, none = (BuildRecord("a", True, 1.0, False, tier=t) for t in ("split", "torch", None))
    assert build_tier_of([none]) is None  # built before tiers were recorded
    assert build_tier_of([split, split, none]) == "split"
    assert build_tier_of([split, torch]) == "mixed"
    run = CandidateRun(builds=[BuildRecord("a", True, 1.0, False, tier="cuda_split")])
    assert base_result(run, "t", "cuda", "cuda:0", 100, ()).build_tier == "cuda_split"


def test_records_and_results_round_trip_through_json() -> None:
    rec = BuildRecord("musaenv_a", True, 4.0, True, tier="pch", declined=tuple(_WHY))
    assert BuildRecord.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    old = BuildRecord.from_dict({"name": "musaenv_a", "ok": True, "seconds": 1e-5, "cached": True})  # older rows
    assert (old.tier, old.declined, old.kind) == (None, (), "extension")
    r = EvalResult(Stage.CORRECT, build_tier="pch", extra={"builds": [rec.to_dict()]})
    assert EvalResult.from_dict(json.loads(json.dumps(r.to_dict(), allow_nan=False))) == r
    assert EvalResult.from_dict({"stage": "correct"}).build_tier is None  # a result recorded before the field
