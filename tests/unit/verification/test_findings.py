"""The records the static checks return: JSON round trips, severities, ordering, the flags a verdict carries."""

from __future__ import annotations

import json

import pytest
from static_samples import with_forward

from musaenv.verification import FLAG_DESCRIPTIONS, Finding, StaticReport, analyze_candidate


def test_finding_rejects_unknown_severity() -> None:
    with pytest.raises(ValueError, match="severity"):
        Finding("x", "fatal", "m")


def test_report_round_trips_through_json() -> None:
    report = analyze_candidate(with_forward("import os\nreturn ext.k(x) + os.getpid()"), policy="permissive")
    again = StaticReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report
    assert report.to_dict()["ok"] == report.ok


def test_errors_warnings_and_flags() -> None:
    report = StaticReport(
        (
            Finding("output_cache", "warning", "w", 3),
            Finding("forbidden_torch_op", "error", "a", 5),
            Finding("forbidden_torch_op", "error", "b", 9),
        )
    )
    assert not report.ok
    assert report.flags == ("forbidden_torch_op",)
    assert report.warning_flags == ("output_cache",)
    assert report.messages == ("error: a", "error: b", "warning: w")


def test_findings_are_sorted_by_line_and_deduplicated() -> None:
    source = with_forward("y = torch.relu(x)\ny = torch.relu(x)\nreturn ext.k(torch.relu(y))")
    lines = [f.line for f in analyze_candidate(source).findings]
    assert lines == sorted(lines) and len(lines) == len(set(lines)) == 3


def test_every_emitted_flag_is_documented() -> None:
    from test_static_cpp import CPP_CHEATS
    from test_static_safety import BANS

    expected = {b[2] for b in BANS} | {c[2] for c in CPP_CHEATS}
    sources = [with_forward("import threading\nreturn torch.relu(x)"), "class ModelNew(:\n", "x = 1\n"]
    emitted = {f.flag for source in sources for f in analyze_candidate(source).findings}
    assert expected | emitted <= set(FLAG_DESCRIPTIONS)
