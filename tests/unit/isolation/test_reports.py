"""The runtime probe's reports: typed per phase, a malformed one refused at decoding, one report per phase."""

from __future__ import annotations

from typing import Any

import pytest

from musaenv.isolation.messages import Phase, ProtocolError, Result, Trial, decode
from musaenv.isolation.reports import RuntimeReports, Tampered, Threads, TimingReport, TrialsReport


def _trials(**fields: Any) -> dict[str, Any]:
    return {**TrialsReport(kernel_calls=[1, 1], threads=Threads(2, 2)).to_dict(), **fields}


@pytest.mark.parametrize(
    "forged",
    [
        {"kernel_calls": ["many"]},  # a count that is no count
        {"threads": [1, 2]},  # a nested record that is no object
        {"threads": {"base": 1, "max_seen": "9", "overuse": []}},  # a mistyped field inside it
        {"tampered": {"timer": [], "harness": [], "extra": 1}},  # an unknown field inside it
        {"repeat_calls": True},  # a bool is no count
        {"profile": ["ok"]},  # the profile is an object or null
    ],
)
def test_a_malformed_trials_report_is_refused_at_decoding(forged: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        decode(_trials(**forged), Trial, TrialsReport, TimingReport, Result)


def test_a_report_missing_a_field_is_refused_and_a_whole_one_decodes_to_typed_fields() -> None:
    whole = _trials()
    del whole["rewrite_trial"]
    with pytest.raises(ProtocolError, match="missing \\['rewrite_trial'\\]"):
        decode(whole, TrialsReport)
    got = decode(_trials(tampered=Tampered(timer=["time.perf_counter"]).to_dict()), TrialsReport, TimingReport)
    assert isinstance(got, TrialsReport) and got.PHASE is Phase.TRIALS
    assert got.threads == Threads(2, 2) and got.tampered.timer == ["time.perf_counter"]
    assert got.kernel_calls == [1, 1] and got.profile is None


def test_one_report_per_phase() -> None:
    reports = RuntimeReports().add(TrialsReport()).add(TimingReport(forward_calls=3))
    assert reports.trials == TrialsReport() and reports.timing is not None and reports.timing.forward_calls == 3
    with pytest.raises(ProtocolError, match="second runtime report of phase 'timing'"):
        reports.add(TimingReport())
