"""The parent's build service for one candidate run: a spec asked for again is answered without another lookup,
and the number of different builds one evaluation may ask for is bounded (their time is not the candidate's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from musaenv.config import EvalConfig
from musaenv.evaluator import candidate
from musaenv.evaluator.candidate import MAX_BUILDS, CandidateRun, _serve_build
from musaenv.isolation.channel import Channel
from musaenv.isolation.messages import BuildRequest, BuildResult
from musaenv.toolchains.loader import BuildOutcome


def _spec(i: int) -> dict[str, Any]:
    return {"cpp_sources": [f"int f{i}() {{ return {i}; }}"], "functions": [f"f{i}"]}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Channel, list[str], CandidateRun]:
    parent, (cr, cw) = Channel.pair()
    worker = SimpleNamespace(chan=parent)
    builds: list[str] = []

    def fake_build(spec: Any, timeout_s: float) -> BuildOutcome:
        builds.append(spec.name)
        return BuildOutcome(ok=True, name=spec.name, so_path=f"/nowhere/{spec.name}.so", seconds=1.0)

    monkeypatch.setattr(candidate, "build_extension", fake_build)
    return worker, Channel(cr, cw), builds, CandidateRun()


def _ask(worker: Any, child: Channel, run: CandidateRun, spec: dict[str, Any]) -> BuildResult:
    _serve_build(worker, BuildRequest(spec), run, EvalConfig(), "cpp", False, 5.0)
    msg, _ = child.recv()
    return BuildResult.from_dict(msg)


def test_a_spec_asked_for_again_is_answered_from_the_run(served):
    worker, child, builds, run = served
    first = _ask(worker, child, run, _spec(1))
    again = _ask(worker, child, run, _spec(1))
    assert first == again and first.ok
    assert len(builds) == 1 and run.compile_time_s == 1.0


def test_more_different_builds_than_the_bound_are_refused(served):
    worker, child, builds, run = served
    for i in range(MAX_BUILDS):
        assert _ask(worker, child, run, _spec(i)).ok
    refused = _ask(worker, child, run, _spec(MAX_BUILDS))
    assert not refused.ok and f"more than {MAX_BUILDS} different extensions" in refused.log
    assert len(builds) == MAX_BUILDS and "more than" in run.compile_log
    assert _ask(worker, child, run, _spec(0)).ok  # one already built is still answered
