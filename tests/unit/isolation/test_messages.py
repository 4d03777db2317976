"""The worker protocol's records: strict parsing, the version check, and a worker of another version end to end."""

from __future__ import annotations

from typing import Any

import pytest

from musaenv.config import EvalConfig, SandboxConfig
from musaenv.isolation import messages
from musaenv.isolation.messages import (
    BuildResult,
    CandidateRequest,
    DrawRequest,
    Failure,
    Go,
    ProtocolError,
    ProtocolMismatch,
    Ready,
    ReferenceRequest,
    Result,
    Stage,
    Timing,
    TimingPlan,
    TimingReport,
    Trial,
    TrialSpec,
    TrialsReport,
    TrialStats,
    decode,
    read_hello,
)
from musaenv.isolation.reports import GpuPlan, KernelTimes, OpTime, PlanLayer, ProfileReport, ProfileRun, SandboxState
from musaenv.types import BuildRecord

RUN = {"task_source": "x", "shapes": [{}], "init_seed": 1, "trials": [TrialSpec(0, 3), TrialSpec(1, 4, 2.0, 90.0)]}
RUN |= {"timing": None, "device": "cpu", "cpu_threads": 1}
TIMED = {**RUN, "timing": TimingPlan(seed=5, pool=4, warmup=1, repeats=9, max_time_s=1.5, flush_bytes=0, keep=[2])}
RECORDS: list[messages.Message] = [
    Ready(pid=12, torch="2.13.0"),
    Stage("load", SandboxState(missing=["sandbox unavailable: no module"])),
    Stage(
        "load",
        SandboxState(
            "extension",
            ["landlock_writes", "seccomp_signals"],
            {"netns": "unprivileged"},
            landlock_abi=3,
            timings_ms={"total": 1.5},
            gpu_plan=GpuPlan("0.5", [PlanLayer("rlimit_as", True, "none")]),
        ),
    ),
    Stage("trials"),
    Trial(index=0, dtypes=["float32"], flags=["input_mutation"]),
    Trial(index=5, dtypes=["float32"], flags=[], skip="the reference's outputs are not finite on these inputs"),
    TrialStats(index=2, stats=[[1.0, 2.0, 3.0, 4]]),
    Timing(samples_ms=[1.0, 2], host_ms=[1.5], kept=[0, 4], kept_counts=[1, 1], fingerprints=[[[0.1]]]),
    TrialsReport(kernel_calls=[1, 2], profile=ProfileReport(ok=True), provenance=None, rewrite_note="skipped"),
    TrialsReport(
        profile=ProfileReport(
            ok=True,
            kernel=KernelTimes(2, 30.5, 0.0),
            op_cpu_us={"aten::mm": [12.0, 0.0]},
            ops=[OpTime("aten::mm", 1, 12.0)],
            seen=["aten::mm"],
            runs=[ProfileRun(ok=True, kernel=KernelTimes(2, 31.0, 0.0))],
        )
    ),
    TimingReport(remeasure_ms=[0.5, 1], forward_calls=9, kernel_calls=None, global_state=["num_threads: 1 -> 4"]),
    Result(
        builds=[BuildRecord("m", True, 0.1, False), BuildRecord("k", False, 0.2, False, tier="nvrtc", kind="cupy")],
        failure=Failure(messages.FailureStage.INPUT_ERROR, "slow"),
    ),
    Result(),
    BuildResult(ok=True, name="ext_abc", so_path="/x.so", seconds=1.5),
    Go(),
    CandidateRequest(
        **RUN,
        candidate="c",
        backend="cpu",
        compile_only=False,
        allow_processes=False,
        workdir="/w",
        sandbox=SandboxConfig(),
        runtime=None,
    ),
    CandidateRequest(
        **TIMED,
        candidate="c",
        backend="cpu",
        compile_only=False,
        allow_processes=False,
        workdir="/w",
        sandbox=SandboxConfig(),
        runtime=messages.RuntimeChecks("strict", checks=True, atol=1e-2, rtol=1e-3),
    ),
    ReferenceRequest(**RUN, task_hash="h", draw_id="d", atol=1e-4, rtol=1e-4),
    DrawRequest(**RUN, task_hash="h", draw_id="d", atol=1e-4, rtol=1e-4),
    ReferenceRequest(**TIMED, task_hash="h", draw_id="d", atol=1e-4, rtol=1e-4),
    # parent <-> fork server
    messages.ForkServerReady(protocol=3, pid=5, torch="2.13.0", musaenv="/m", threads=1, cuda_initialized=False),
    messages.Spawn(role="candidate", cwd="/w"),
    messages.ExitQuery(7),
    messages.Release(7),
    messages.Spawned(7),
    messages.ExitStatus(-9),
    messages.ExitStatus(None, unknown=True),
    messages.Released(),
    messages.Refused("spawn needs 3 descriptors"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_and_refuses_unknown_missing_and_mistyped_fields(record: Any) -> None:
    d = record.to_dict()
    assert type(record).from_dict(d) == record
    assert decode(d, type(record)) == record
    with pytest.raises(ProtocolError, match="unknown fields \\['surplus'\\]"):
        type(record).from_dict({**d, "surplus": 1})
    for name in [k for k in d if k != "type"]:
        with pytest.raises(ProtocolError, match=f"missing \\['{name}'\\]"):
            type(record).from_dict({k: v for k, v in d.items() if k != name})
        with pytest.raises(ProtocolError, match=f"field '{name}'"):
            type(record).from_dict({**d, name: object()})


def test_types_are_checked_inside_lists_and_nested_records() -> None:
    with pytest.raises(ProtocolError, match="'dtypes'"):
        Trial.from_dict({"type": "trial", "index": 0, "dtypes": ["float32", 7], "flags": [], "skip": ""})
    with pytest.raises(ProtocolError, match="'index'"):
        Trial.from_dict({"type": "trial", "index": True, "dtypes": [], "flags": [], "skip": ""})  # a bool is no count
    with pytest.raises(ProtocolError, match="missing \\['log'\\]"):
        Result.from_dict({**Result().to_dict(), "failure": {"stage": "cheating"}})
    with pytest.raises(ProtocolError, match="expected type 'timing'"):
        Timing.from_dict(Trial(0, [], []).to_dict())


def test_decode_refuses_a_type_the_reader_does_not_expect() -> None:
    with pytest.raises(ProtocolError, match="unexpected message type 'go'"):
        decode(Go().to_dict(), Trial, Result)
    with pytest.raises(ProtocolError, match="unexpected message type None"):
        decode({"index": 0}, Trial)


def test_a_hello_of_another_version_names_both_versions() -> None:
    hello = Ready(pid=1, torch="2.13.0").to_dict()
    assert read_hello(hello).protocol == messages.PROTOCOL_VERSION
    with pytest.raises(ProtocolMismatch) as e:
        read_hello({**hello, "protocol": messages.PROTOCOL_VERSION + 1})
    assert f"version {messages.PROTOCOL_VERSION + 1}" in str(e.value)
    assert f"this evaluator version {messages.PROTOCOL_VERSION}" in str(e.value)
    with pytest.raises(ProtocolMismatch, match="version None"):  # an old worker without a version at all
        read_hello({"type": "ready", "pid": 1, "torch": "2.13.0"})


def test_a_worker_of_another_protocol_version_is_an_infra_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers run this checkout's code (version N); the evaluator is made to expect N + 1, as if the two had
    been installed from different releases. Neither a forked nor a fresh worker is used; no candidate verdict."""
    from musaenv.evaluator.local import LocalEvaluator
    from musaenv.tasks.builtin import get_task
    from musaenv.types import Stage as Verdict
    from tests.integration.hazards import hazard_candidate

    theirs = messages.PROTOCOL_VERSION
    monkeypatch.setattr(messages, "PROTOCOL_VERSION", theirs + 1)
    with LocalEvaluator("cpu", EvalConfig(static_policy="off")) as ev:
        result = ev.evaluate(get_task("l1_relu"), hazard_candidate("relu_ok"))
    assert result.stage is Verdict.INFRA_ERROR
    text = " ".join(result.messages)
    assert f"protocol version {theirs}" in text and f"this evaluator version {theirs + 1}" in text


def test_a_failure_names_one_of_the_worker_stages_and_never_a_verdict_it_cannot_give() -> None:
    sent = Result(failure=Failure(messages.FailureStage.COMPILE_ERROR, "log")).to_dict()
    got = decode(sent, Result)
    assert isinstance(got, Result) and got.failure is not None
    assert got.failure.stage is messages.FailureStage.COMPILE_ERROR and got.failure.stage == "compile_error"
    for forged in ("correct", "cheating", "COMPILE_ERROR", 3):
        with pytest.raises(ProtocolError, match="'stage'"):
            decode({**sent, "failure": {"stage": forged, "log": ""}}, Result)


def test_the_sandbox_settings_travel_as_the_config_and_a_bad_value_is_refused_at_decoding() -> None:
    req = next(r for r in RECORDS if isinstance(r, CandidateRequest))
    sent = {**req.to_dict(), "sandbox": SandboxConfig(address_space_mb=512).to_dict()}
    got = decode(sent, CandidateRequest)
    assert isinstance(got, CandidateRequest) and got.sandbox == SandboxConfig(address_space_mb=512)
    for forged in ({"address_space_mb": -1}, {"no_such_limit": 1}):
        with pytest.raises(ProtocolError, match="SandboxConfig"):
            decode({**sent, "sandbox": forged}, CandidateRequest)


def test_a_workers_build_records_are_refused_at_decoding_when_malformed() -> None:
    sent = Result(builds=[BuildRecord("k", True, 0.5, False, tier="nvrtc", kind="cupy")]).to_dict()
    got = decode(sent, Result)
    assert isinstance(got, Result) and got.builds == [BuildRecord("k", True, 0.5, False, tier="nvrtc", kind="cupy")]
    good = sent["builds"][0]
    forged: list[Any] = [
        {**good, "seconds": "0.5"},  # a string is no time
        {**good, "ok": 1},  # nor a count a flag
        {**good, "cached": None},
        {**good, "kind": ["cupy"]},
        {**good, "declined": [{"tier": "pch"}]},  # a declined path without its reason
        {**good, "surplus": 1},
        {k: v for k, v in good.items() if k != "name"},
        ["k", True, 0.5, False],
    ]
    for build in forged:
        with pytest.raises(ProtocolError, match=r"BuildRecord|field 'builds'"):
            decode({**sent, "builds": [build]}, Result)


def test_a_forged_profile_is_refused_at_decoding() -> None:
    sent = TrialsReport(profile=ProfileReport(ok=True, ops=[OpTime("aten::mm", 1, 12.0)])).to_dict()
    profile = sent["profile"]
    for forged in (
        {**profile, "ops": [1, 2]},
        {**profile, "ops": [{"name": "aten::mm", "cpu_us": "fast"}]},
        {**profile, "op_cpu_us": {"aten::mm": "12"}},
        {**profile, "op_cpu_us": {"aten::mm": [12.0, "0"]}},
        {**profile, "kernel": [1, 2.0, 0.0]},
        {**profile, "runs": [{"ok": True, "wall_us": 5.0}]},  # a run carries only what coverage reads
        {**profile, "ok": "yes"},
    ):
        with pytest.raises(ProtocolError):
            decode({**sent, "profile": forged}, TrialsReport)


def test_the_sandbox_report_is_refused_at_decoding_when_malformed_and_reads_as_before_in_a_result() -> None:
    state = SandboxState("python", ["seccomp_signals"], {"landlock_writes": "no abi"}, timings_ms={"total": 2.0})
    sent = Stage("load", state).to_dict()
    assert decode(sent, Stage) == Stage("load", state)
    report = state.report()
    assert "gpu_plan" not in report and "missing" not in report and report["timings_ms"]["total"] == 2.0
    assert SandboxState(missing=["why"]).report() == {"applied": [], "missing": ["why"]}
    for forged in (
        {**sent["sandbox"], "applied": "seccomp_signals"},  # a string is no list of measures
        {**sent["sandbox"], "timings_ms": {"total": "fast"}},
        {**sent["sandbox"], "not_applied": [["netns", "why"]]},
        {**sent["sandbox"], "gpu_plan": {"device_memory": "1", "layers": [{"name": "x"}]}},
        {**sent["sandbox"], "surplus": 1},
    ):
        with pytest.raises(ProtocolError):
            decode({**sent, "sandbox": forged}, Stage)
