"""docs/hacks.md, generated from the rule table: ``python -m musaenv.verification.rules_doc > docs/hacks.md``.

``tests/unit/verification/test_rules.py`` checks that the committed file equals this module's output.
"""

from __future__ import annotations

import sys

from musaenv.verification.hack_classes import HACK_CLASSES
from musaenv.verification.rules import RULES, Rule, Severity

__all__ = ["markdown"]

_HEAD = """# Hack classes and the flags that refuse them

Generated from `musaenv/verification/rules.py` by `python -m musaenv.verification.rules_doc > docs/hacks.md`;
do not edit by hand. Hack classes are those of HACKS.md (S: not doing the work, T: gaming the clock, B: the build and
shared state). Severity per policy: `error` decides the verdict, `warning` is reported only, `unscored` marks a
verdict that is not the candidate's, `-` means not raised. Candidates are files under
`tests/adversarial/candidates*/` that trip the flag. A class no flag names is refused by the comparison (an
`incorrect` verdict: S16, S18), the sandbox or the build service. How each defence works:
[verification.md](verification.md).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _severity(sev: Severity) -> list[str]:
    return [s or "-" for s in sev]


def _row(rule: Rule) -> str:
    cands = ", ".join(f"`{c}`" for c in rule.candidates) or f"none: {rule.no_candidate}"
    cells = [f"`{rule.name}`", ", ".join(rule.hacks) or "-", ", ".join(rule.layers), *_severity(rule.severity),
             rule.message + (f" ({rule.note})" if rule.note else ""), cands]  # fmt: skip
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def markdown() -> str:
    """The whole of docs/hacks.md."""
    lines = [_HEAD, "## Hack classes", "", "| Class | Title | Flags |", "|---|---|---|"]
    for hack, title in HACK_CLASSES.items():
        flags = ", ".join(f"`{r.name}`" for r in RULES if hack in r.hacks) or "none"
        lines.append(f"| {hack} | {_cell(title)} | {flags} |")
    lines += ["", "## Flags", ""]
    lines.append("| Flag | Classes | Layers | strict | kernelbench | permissive | off | Message | Candidates |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    lines += [_row(r) for r in RULES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
