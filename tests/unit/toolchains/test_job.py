"""The builder's job file and report (musaenv.toolchains.job): strict records, and a version skew is the harness's
failure (``infra``), reported with both versions, never the candidate's ``compile_error``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from musaenv import _env
from musaenv.isolation.records import ProtocolError
from musaenv.toolchains import builder_launch, job, loader
from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.job import JOB_VERSION, BuildReport, CompileJob, JobMismatch, WarmupJob

_SPEC = BuildSpec(cpp_sources=("int f() { return 1; }",), functions=("f",), extra_cflags=("-O2",))


def _compile_job(**over: Any) -> CompileJob:
    fields = {"name": "m_abc", "build_mode": "fast", "pch_cache": "/tmp/pch", "timeout_s": 60, "parent_pid": 1,
              "confine": True} | over  # fmt: skip
    return CompileJob.of(_SPEC.to_dict(), **fields)


def test_compile_job_round_trips_and_reads_as_the_flat_spec() -> None:
    rec = _compile_job()
    assert CompileJob.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    flat = rec.spec()
    assert flat["cpp_sources"] == ["int f() { return 1; }"] and flat["functions"] == ["f"]
    assert flat["version"] == JOB_VERSION and flat["name"] == "m_abc" and flat["extra_cflags"] == ["-O2"]
    assert {k: flat[k] for k in _SPEC.to_dict()} == _SPEC.to_dict()  # every spec field, unchanged


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"surprise": 1}, "unknown fields ['surprise']"),
        ({"timeout_s": "60"}, "'timeout_s'"),
        ({"confine": 1}, "'confine'"),  # an int is no bool
        ({"cpp_sources": [1]}, "'cpp_sources'"),
        ({"type": "warmup"}, "expected type"),
    ],
)
def test_compile_job_rejects_unknown_mistyped_and_misnamed(change: dict[str, Any], why: str) -> None:
    d = _compile_job().to_dict() | change
    with pytest.raises(ProtocolError, match=why.replace("[", r"\[").replace("]", r"\]")):
        CompileJob.from_dict(d)


def test_compile_job_rejects_a_missing_field() -> None:
    d = _compile_job().to_dict()
    del d["pch_cache"]
    with pytest.raises(ProtocolError, match=r"missing \['pch_cache'\]"):
        CompileJob.from_dict(d)


def test_warmup_job_and_report_round_trip(tmp_path: Path) -> None:
    w = WarmupJob(version=JOB_VERSION, items=[{"kind": "split", "extra_cflags": []}], pch_cache="/p", timeout_s=9.5,
                  parent_pid=2, background=True)  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(w.to_dict()))
    assert job.read_job(tmp_path / "spec.json") == w
    r = BuildReport(ok=True, tier="fast", steps=[{"cmd": "g++", "rc": 0}], wanted=["split"])
    (tmp_path / "result.json").write_text(json.dumps(r.to_dict()))
    assert job.read_report(tmp_path / "result.json") == r
    assert job.read_report(tmp_path / "missing.json") is None  # no report: the builder died before writing it
    (tmp_path / "cut.json").write_text('{"version": 1, "ok"')
    assert job.read_report(tmp_path / "cut.json") is None


@pytest.mark.parametrize("version", [None, 0, JOB_VERSION + 1])
def test_another_version_names_both(tmp_path: Path, version: object) -> None:
    d = BuildReport().to_dict()
    if version is None:
        del d["version"]
    else:
        d["version"] = version
    (tmp_path / "result.json").write_text(json.dumps(d))
    with pytest.raises(JobMismatch, match=f"version {version!r}, this code speaks version {JOB_VERSION}"):
        job.read_report(tmp_path / "result.json")
    (tmp_path / "spec.json").write_text(json.dumps(_compile_job().to_dict() | {"version": version}))
    with pytest.raises(JobMismatch):
        job.read_job(tmp_path / "spec.json")


def test_a_builder_given_a_job_of_another_version_reports_it_as_infra(tmp_path: Path) -> None:
    # The real builder process, on a job a newer musaenv would write: refused before any build, both versions named.
    (tmp_path / "spec.json").write_text(json.dumps(_compile_job().to_dict() | {"version": JOB_VERSION + 1}))
    cmd = builder_launch.builder_command(tmp_path)
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env.child_env(), timeout=120, capture_output=True, text=True)
    report = job.read_report(tmp_path / "result.json")
    assert proc.returncode == 1 and report is not None, proc.stdout + proc.stderr
    assert not report.ok and report.infra and report.confinement  # answered from inside the confinement
    assert f"job version {JOB_VERSION + 1}" in report.log and f"speaks version {JOB_VERSION}" in report.log


def test_a_report_of_another_version_is_an_infra_error_not_a_compile_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The builder side is replaced by one of an older release (its report has no version); the loader's reading
    # of it is what is tested: an infra_error naming both versions, and no failed verdict cached for the name.
    def old_builder(tmp: Path, timeout_s: float) -> tuple[int, None]:
        (tmp / "result.json").write_text(json.dumps({"ok": False, "log": "error: x", "tier": "fast"}))
        return 1, None

    monkeypatch.setattr(loader, "_run_builder", old_builder)
    out = loader._build_now(_SPEC, "m_skew", tmp_path, 30.0, "fast", 0.0)
    assert not out.ok and out.infra_error and "version None" in out.log and f"version {JOB_VERSION}" in out.log
    assert not (tmp_path / "m_skew" / "failed.json").exists()
