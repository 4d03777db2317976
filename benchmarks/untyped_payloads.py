"""How untyped are the payloads on a step's path? ``dict[str, Any]`` annotations and string-key reads, per module.

"The step's path" (issue #30, item 1): the modules one ``KernelGen-v0`` step goes through from the response to the
verdict, build service excepted (``musaenv/toolchains/``, the build spec included, is counted by its own rework):
``env.py``, ``types.py``, ``evaluator/``, ``isolation/messages.py`` and ``isolation/records.py`` (with the records
beside them: ``isolation/reports.py``, ``plans.py``, ``probing.py``), ``worker/``, ``verification/runtime*.py``.

Counted per file, outside comments: ``dict[str, Any]`` (the text, as the issue counted it with grep) and string-key
reads, a string literal subscript ``x["key"]`` or ``.get("key"`` (stores ``x["key"] = ...`` are reads here too: the
grep cannot tell them apart, and both spell a payload's shape in strings).

Usage: ``python benchmarks/untyped_payloads.py [--root .] [--out out/untyped_payloads.json]``. Prints a table and
the totals, writes JSON, never asserts.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

#: The step's path, as globs under the package root (the records module beside messages.py counts when present).
STEP_PATH = (
    "env.py",
    "types.py",
    "evaluator/*.py",
    "isolation/messages.py",
    "isolation/records.py",
    "isolation/reports.py",
    "isolation/plans.py",
    "isolation/probing.py",
    "worker/*.py",
    "verification/runtime*.py",
)
UNTYPED = re.compile(r"dict\[str, Any\]")
KEY_READ = re.compile(r"""\[\s*["'][^"'\]]*["']\s*\]|\.get\(\s*["']""")


def _code(line: str) -> str:
    """The line without a trailing ``#`` comment (a ``#`` inside a string literal is rare enough on these files)."""
    return line.split("  #", 1)[0] if not line.lstrip().startswith("#") else ""


def count(root: Path) -> dict[str, dict[str, int]]:
    """Per file of the step's path under ``root`` (the repository), the two counts."""
    package = root / "musaenv"
    out: dict[str, dict[str, int]] = {}
    for pattern in STEP_PATH:
        for path in sorted(package.glob(pattern)):
            lines = [_code(line) for line in path.read_text().splitlines()]
            out[str(path.relative_to(root))] = {
                "dict_str_any": sum(len(UNTYPED.findall(line)) for line in lines),
                "key_reads": sum(len(KEY_READ.findall(line)) for line in lines),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    per_file = count(args.root)
    totals = {k: sum(v[k] for v in per_file.values()) for k in ("dict_str_any", "key_reads")}
    for name, counts in per_file.items():
        if any(counts.values()):
            print(f"{name:48} {counts['dict_str_any']:4} {counts['key_reads']:4}")
    print(f"{'total (dict[str, Any], string-key reads)':48} {totals['dict_str_any']:4} {totals['key_reads']:4}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"files": per_file, "totals": totals}, indent=1))


if __name__ == "__main__":
    main()
