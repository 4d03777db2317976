"""Verification of candidates: static reward-hacking checks (and, beside them, correctness and runtime guards).

The static checks need no device and run in well under a second::

    from musaenv.verification import analyze_candidate

    report = analyze_candidate(source, policy="strict", backend="cuda")
    if not report.ok:
        print(report.flags, report.messages)
"""

from __future__ import annotations

from musaenv.verification.findings import FLAG_DESCRIPTIONS, Finding, StaticReport
from musaenv.verification.static_py import analyze_candidate

__all__ = ["FLAG_DESCRIPTIONS", "Finding", "StaticReport", "analyze_candidate"]
