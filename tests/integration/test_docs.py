"""Code blocks of README.md and docs/*.md run as written.

A block is run when the line before its fence is a marker; a block that cannot run here says so, with why::

    <!-- docs-test: run -->                          the block runs alone (python or bash)
    <!-- docs-test: run, continues -->               appended to the previous python block of the file
    <!-- docs-test: run, requires=pyarrow -->        skipped (not failed) where a module is missing (the extra)
    <!-- docs-test: run, replace=range(20)->range(2) -->   a smaller budget for the test (repeatable)
    <!-- docs-test: skip (needs a CUDA GPU) -->      not runnable here, and why

Python blocks run with this interpreter in a fresh folder; bash blocks with ``bash -euo pipefail`` and this
interpreter's scripts (``musaenv``) first on ``PATH``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- docs-test: (run|skip)\b(.*?)-->\s*$")
FENCE = re.compile(r"^```(\w+)\s*$")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass(frozen=True)
class Block:
    """One marked block (a ``continues`` block already joined to the one it continues)."""

    where: str
    lang: str
    code: str
    requires: tuple[str, ...]


def _options(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The marker's options, and its ``replace=OLD->NEW`` pairs (there may be several)."""
    opts, replaces = {}, []
    for part in (p.strip() for p in text.split(",")):
        key, _, value = part.partition("=")
        if key == "replace":
            old, _, new = value.partition("->")
            replaces.append((old, new))
        elif key:
            opts[key] = value
    return opts, replaces


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m or m.group(1) != "run":
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        assert fence, f"{path.name}:{i + 1}: a docs-test marker must sit right above a fenced block"
        end = lines.index("```", i + 2)
        code = "\n".join(lines[i + 2 : end]) + "\n"
        opts, replaces = _options(m.group(2))
        for old, new in replaces:
            assert old in code, f"{path.name}:{i + 1}: {old!r} is not in the block"
            code = code.replace(old, new)
        requires = tuple(opts.get("requires", "").split("+")) if opts.get("requires") else ()
        where = f"{path.relative_to(ROOT)}:{i + 3}"
        if "continues" in opts:
            prev = found.pop()
            found.append(Block(where, prev.lang, prev.code + code, prev.requires + requires))
        else:
            found.append(Block(where, fence.group(1), code, requires))
    return found


BLOCKS = [b for doc in DOCS for b in _blocks(doc)]


def test_markers_are_well_formed() -> None:
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            if "docs-test" in line:
                m = MARKER.match(line)
                assert m, f"{doc.name}:{n}: malformed marker {line!r}"
                if m.group(1) == "skip":
                    assert re.search(r"\(.+\)", m.group(2)), f"{doc.name}:{n}: a skip says why, in parentheses"
    assert BLOCKS, "no runnable block found"


@pytest.mark.parametrize("block", BLOCKS, ids=[" ".join([b.where, *b.requires]) for b in BLOCKS])
def test_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    for module in block.requires:
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (an optional extra)")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if block.lang == "python":
        (tmp_path / "block.py").write_text(block.code)
        cmd = [sys.executable, "block.py"]
    elif block.lang in ("bash", "sh", "shell"):
        cmd = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        pytest.fail(f"{block.where}: cannot run a {block.lang!r} block")
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, f"{block.where} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
