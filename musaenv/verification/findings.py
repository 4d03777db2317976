"""Records the static checks return: :class:`Finding` and :class:`StaticReport`.

A finding is data about a candidate, never an exception. ``error`` findings decide a ``cheating`` (or, for
``syntax_error``, ``format_error``) verdict; ``warning`` findings are reported and leave the verdict alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from musaenv.backends import REGISTRY
from musaenv.config import POLICIES
from musaenv.verification.rules import by_layer

__all__ = ["BACKENDS", "ERROR", "FLAG_DESCRIPTIONS", "POLICIES", "WARNING", "Finding", "StaticReport", "describe"]

ERROR = "error"
WARNING = "warning"
BACKENDS = tuple(REGISTRY)

#: Every flag the static checks and the built module's imports emit, with what it means (HACKS.md classes in
#: brackets): a view of :data:`musaenv.verification.rules.RULES`.
FLAG_DESCRIPTIONS: dict[str, str] = {
    r.name: r.message + (f" [{', '.join(r.hacks)}]" if r.hacks else "") for r in by_layer("static", "binary")
}


@dataclass(frozen=True)
class Finding:
    """One thing the static checks noticed.

    Attributes:
        flag: Stable snake_case name of the construct, e.g. ``forbidden_torch_op``.
        severity: ``"error"`` (decides the verdict) or ``"warning"`` (reported only).
        message: One readable sentence naming the construct and where it is.
        line: 1-based line in the candidate's Python source, ``None`` when there is no single line.
    """

    flag: str
    severity: str
    message: str
    line: int | None = None

    def __post_init__(self) -> None:
        if self.severity not in (ERROR, WARNING):
            raise ValueError(f"Finding.severity must be 'error' or 'warning', got {self.severity!r}")

    @property
    def is_error(self) -> bool:
        """True for error-level findings."""
        return self.severity == ERROR

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {"flag": self.flag, "severity": self.severity, "message": self.message, "line": self.line}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """Inverse of :meth:`to_dict`."""
        return cls(flag=d["flag"], severity=d["severity"], message=d["message"], line=d.get("line"))


def describe(flag: str) -> str:
    """What ``flag`` means, in words fit for feedback (without the HACKS.md references)."""
    return re.sub(r"\s*\[[^\]]*\]$", "", FLAG_DESCRIPTIONS.get(flag, flag.replace("_", " ")))


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class StaticReport:
    """Everything the static checks found out about one candidate.

    Attributes:
        findings: Findings sorted by line (findings without a line last).
        kernel_calls: Custom kernels reachable from ``ModelNew.forward`` (extension functions, Triton kernels).
        torch_calls: Torch (or other library) compute reachable from ``forward``: what the permissive policy
            tolerates, reported as coverage information.
    """

    findings: tuple[Finding, ...]
    kernel_calls: tuple[str, ...] = ()
    torch_calls: tuple[str, ...] = ()

    @property
    def errors(self) -> tuple[Finding, ...]:
        """Error-level findings."""
        return tuple(f for f in self.findings if f.is_error)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Warning-level findings."""
        return tuple(f for f in self.findings if not f.is_error)

    @property
    def ok(self) -> bool:
        """True when no error-level finding was made."""
        return not self.errors

    @property
    def flags(self) -> tuple[str, ...]:
        """Distinct flags of the errors, in order (what ``EvalResult.flags`` carries)."""
        return _unique([f.flag for f in self.errors])

    @property
    def warning_flags(self) -> tuple[str, ...]:
        """Distinct flags of the warnings, in order (what ``EvalResult.warnings`` carries)."""
        return _unique([f.flag for f in self.warnings])

    @property
    def messages(self) -> tuple[str, ...]:
        """One line per finding, errors first, ready for the feedback text."""
        ordered = self.errors + self.warnings
        return tuple(f"{f.severity}: {f.message}" for f in ordered)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "findings": [f.to_dict() for f in self.findings],
            "kernel_calls": list(self.kernel_calls),
            "torch_calls": list(self.torch_calls),
            "ok": self.ok,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StaticReport:
        """Inverse of :meth:`to_dict`."""
        return cls(
            findings=tuple(Finding.from_dict(f) for f in d["findings"]),
            kernel_calls=tuple(d.get("kernel_calls", ())),
            torch_calls=tuple(d.get("torch_calls", ())),
        )


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Drop exact duplicates and sort by line (no line last), keeping discovery order otherwise."""
    seen: dict[tuple[str, str, int | None], Finding] = {}
    for f in findings:
        seen.setdefault((f.flag, f.message, f.line), f)
    big = 1 << 62
    return tuple(sorted(seen.values(), key=lambda f: big if f.line is None else f.line))
