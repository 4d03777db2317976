"""Code blocks of README.md and docs/*.md run as written.

A block is run when the line before its fence is a marker; a block that cannot run here says so, with why::

    <!-- docs-test: run -->                          the block runs alone (python or bash)
    <!-- docs-test: run, continues -->               appended to the previous python block of the file
    <!-- docs-test: run, requires=pyarrow -->        skipped (not failed) where a module is missing (the extra)
    <!-- docs-test: run, replace=range(20)->range(2) -->   a smaller budget for the test (repeatable)
    <!-- docs-test: run, given=generations.jsonl -->  a file or folder the reader is assumed to have, copied from
                                                     tests/data/docs/ into the block's folder (``+`` joins several)
    <!-- docs-test: skip (needs a CUDA GPU) -->      not runnable here, and why

Python blocks run with this interpreter in a fresh folder; bash blocks with ``bash -euo pipefail`` and this
interpreter's scripts (``musaenv``) first on ``PATH``.

Which blocks need a marker: every fenced block labelled as code that runs (``python``, ``bash``, ``sh``, ...),
so a new doc block is either run here or says why it cannot be. A fence has a label; ``text``, ``json`` and the
like (output samples, file formats) need no marker, but a ``text`` block may not hold commands (a line starting
with ``musaenv``, ``python``, ``pip``...): label those ``bash`` and mark them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GIVEN = ROOT / "tests" / "data" / "docs"
MARKER = re.compile(r"^<!-- docs-test: (run|skip)\b(.*?)-->\s*$")
FENCE = re.compile(r"^```(\w+)\s*$")
RUNNABLE = {"python", "py", "bash", "sh", "shell", "console", "zsh"}
COMMAND = re.compile(r"^\s*(\$ |musaenv |python |python3 |pip |bash |PYTHONPATH=|vf-eval )")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass(frozen=True)
class Block:
    """One marked block (a ``continues`` block already joined to the one it continues)."""

    where: str
    lang: str
    code: str
    requires: tuple[str, ...]
    given: tuple[str, ...] = ()


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
        given = tuple(opts.get("given", "").split("+")) if opts.get("given") else ()
        where = f"{path.relative_to(ROOT)}:{i + 3}"
        if "continues" in opts:
            prev = found.pop()
            found.append(Block(where, prev.lang, prev.code + code, prev.requires + requires, prev.given + given))
        else:
            found.append(Block(where, fence.group(1), code, requires, given))
    return found


def _fenced(path: Path) -> list[tuple[int, str, str, list[str]]]:
    """Every fenced block of a doc: (line of its opening fence, its label, the line above, its lines)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, start = [], None
    for n, line in enumerate(lines):
        if not line.lstrip().startswith("```"):
            continue
        if start is None:
            start = n
        else:
            label = lines[start].strip()[3:].strip()
            out.append((start + 1, label, lines[start - 1] if start else "", lines[start + 1 : n]))
            start = None
    assert start is None, f"{path.name}:{start}: a fence is never closed"
    return out


BLOCKS = [b for doc in DOCS for b in _blocks(doc)]


def test_markers_are_well_formed() -> None:
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            if "docs-test" in line and line.lstrip().startswith("<!--"):  # prose may name the markers
                m = MARKER.match(line)
                assert m, f"{doc.name}:{n}: malformed marker {line!r}"
                if m.group(1) == "skip":
                    assert re.search(r"\(.+\)", m.group(2)), f"{doc.name}:{n}: a skip says why, in parentheses"
    assert BLOCKS, "no runnable block found"


def test_markers_on_every_code_block() -> None:
    """Every python/shell block says whether it runs (and is run here) or why not; nothing slips in unlabelled."""
    missing = []
    for doc in DOCS:
        name = doc.relative_to(ROOT)
        for line, label, above, body in _fenced(doc):
            assert label, f"{name}:{line}: a fenced block without a label (python, bash, text, json...)"
            if label in RUNNABLE:
                if not MARKER.match(above):
                    missing.append(f"{name}:{line} ({label})")
            else:
                commands = [b for b in body if COMMAND.match(b)] if label == "text" else []
                assert not commands, f"{name}:{line}: commands in a text block (label it bash, mark it): {commands}"
    assert not missing, "blocks with no docs-test marker (run, or skip (why)):\n" + "\n".join(missing)


@pytest.mark.parametrize("block", BLOCKS, ids=[" ".join([b.where, *b.requires]) for b in BLOCKS])
def test_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    for module in block.requires:
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (an optional extra)")
    for name in block.given:
        src = GIVEN / name
        assert src.exists(), f"{block.where}: given={name} is not in {GIVEN}"
        dest = tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest)
        else:
            shutil.copy(src, dest)
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
