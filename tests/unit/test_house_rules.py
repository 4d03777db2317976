"""The size rule of the house style (shared ARCHITECTURE.md): modules under ~400 lines, functions under ~60.

A module or function over its limit is allowed only with its reason written at its top, where the next reader
meets it: a line starting ``Size:`` in the module's docstring, or a ``# size:`` comment just above a function or
within its first lines (or a ``Size:`` line in its docstring). The reason says why the concept is one piece or where
its split is planned; a bare marker does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "musaenv"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
_MIN_REASON_CHARS = 20  # "Size: big" is not a reason
_DATA_DIRS = {"suite", "solutions"}  # KernelBench-format task programs and reference solutions: data, not library


def _library_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not _DATA_DIRS & set(p.relative_to(PACKAGE).parts))


def _has_reason(text: str, marker: str) -> bool:
    for line in text.splitlines():
        s = line.strip().lstrip("#").strip()
        if s.lower().startswith(marker.lower()) and len(s) - len(marker) >= _MIN_REASON_CHARS:
            return True
    return False


def _module_violation(path: Path) -> str | None:
    source = path.read_text()
    n = len(source.splitlines())
    if n <= MAX_MODULE_LINES:
        return None
    doc = ast.get_docstring(ast.parse(source)) or ""
    if _has_reason(doc, "Size:"):
        return None
    where = path.relative_to(PACKAGE.parent)
    return f"{where}: {n} lines > {MAX_MODULE_LINES} and no 'Size: <reason>' in its docstring"


def _function_violations(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assert node.end_lineno is not None
        n = node.end_lineno - node.lineno + 1
        if n <= MAX_FUNCTION_LINES:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        # the comment block right above it, its signature, its docstring's start and first comments
        head = "\n".join(lines[max(0, first - 4) : node.lineno + 12])
        doc = ast.get_docstring(node) or ""
        if _has_reason(head, "size:") or _has_reason(doc, "Size:"):
            continue
        where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"
        found.append(f"{where}: {n} lines > {MAX_FUNCTION_LINES} and no '# size: <reason>' at its top")
    return found


def test_modules_over_the_limit_say_why() -> None:
    bad = [v for p in _library_modules() if (v := _module_violation(p))]
    assert not bad, "\n".join(bad)


def test_functions_over_the_limit_say_why() -> None:
    bad = [v for p in _library_modules() for v in _function_violations(p)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("Size: one concept, the PCH store; split planned in issue 30", True),
        ("Size: big", False),
        ("nothing here", False),
    ],
)
def test_a_reason_must_say_something(text: str, ok: bool) -> None:
    assert _has_reason(text, "Size:") is ok
