"""Port CUDA candidates, reference programs and raw ``.cu`` files to MUSA (Moore Threads).

MUSA mirrors the CUDA runtime with a ``musa`` prefix and keeps CUDA's kernel language
(``__global__``, ``threadIdx``, ``<<<>>>``), so porting is renaming, done token-aware:

* C++/CUDA text (a raw ``.cu`` file, or every string literal of a Python file) is scanned as
  identifiers, ``ns::cuda::member`` chains and ``#include`` lines; only whole identifiers are renamed,
  so ``cudaMallocXYZ`` is never half-renamed and user names such as ``my_add_cuda`` are left alone.
* Python code is scanned with :mod:`tokenize`: ``.cuda`` attributes, ``torch.cuda``, device strings,
  ``load_inline`` keywords and the ``torch.utils.cpp_extension`` import; ``import torch_musa`` is added.

Porting is idempotent (``port(port(x)) == port(x)``). Where each mapping comes from, and which are
certain or assumed, is in ``docs/musa.md``.

Size: one concept, the CUDA-to-MUSA port: the C++ and Python rewriters share the identifier tables and the rewrite
context; split by language, each half would import the other's tables.
"""
# Kept whole (~420 lines): the rewrite rules are one pass over tokens; the rest is its ~35-line command
# (``musaenv port``).

# Over ~400 lines on purpose: one token pass over a file (C++ and Python edits share its context and offsets);
# the mapping tables already live in musa_tables.py and the CLI glue at the end is ~35 lines.
from __future__ import annotations

import argparse
import ast
import bisect
import io
import logging
import re
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from musaenv.backends.musa_tables import (
    C10_MUSA_SYMBOLS,
    CPP_TOKEN,
    CUDA_RUNTIME_NAMES,
    DNN_WARNING,
    IDENT_WARN,
    IDENTS,
    INCLUDE_WARN,
    INCLUDES,
    MUSA_EXTENSION,
    NVCC_FLAG,
    NVCC_FLAG_WARNING,
    PREFIXES,
    PY_ATTRS,
    PY_LOADER_NAMES,
)
from musaenv.errors import ConfigError

__all__ = ["PortResult", "PortWarning", "Rewrite", "add_port_subparser", "main", "port_file", "port_source"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rewrite:
    """One kind of rename applied, with how often (``rule``: header, runtime-api, torch-namespace, ...)."""

    rule: str
    before: str
    after: str
    count: int


@dataclass(frozen=True)
class PortWarning:
    """A construct left unchanged because no MUSA equivalent is known (``line`` is 1-based, in the input)."""

    line: int
    construct: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.construct}: {self.reason}"


@dataclass(frozen=True)
class PortResult:
    """Outcome of :func:`port_source`.

    Attributes:
        text: The ported source.
        kind: ``python`` or ``cuda`` (how the input was read).
        rewrites: Renames applied, one entry per (rule, before, after), sorted.
        warnings: Constructs left unchanged because no MUSA equivalent is known, by line.
    """

    text: str
    kind: str
    rewrites: tuple[Rewrite, ...]
    warnings: tuple[PortWarning, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form without the text."""
        return {
            "kind": self.kind,
            "rewrites": [vars(r) for r in self.rewrites],
            "warnings": [vars(w) for w in self.warnings],
        }


class _Ctx:
    """Offsets, rewrite counts and warnings for one input text."""

    def __init__(self, text: str) -> None:
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.warnings: dict[tuple[int, str], PortWarning] = {}
        self.device_used = False

    def offset(self, row: int, col: int) -> int:
        return self.line_starts[row - 1] + col

    def rewrite(self, rule: str, before: str, after: str) -> str:
        self.counts[(rule, before, after)] += 1
        return after

    def warn(self, offset: int, construct: str, reason: str) -> None:
        line = bisect.bisect_right(self.line_starts, offset)
        self.warnings.setdefault((line, construct), PortWarning(line, construct, reason))


# ------------------------------------------------------------------------------------------------ C++ text
def _escape_view(text: str) -> str:
    """Same-length copy with backslash escapes blanked (``\\n`` becomes a newline), offsets unchanged."""
    return re.sub(r"\\(.)", lambda m: " \n" if m.group(1) in "n\n" else "  ", text, flags=re.S)


def _map_identifier(name: str) -> tuple[str, str] | None:
    if name in IDENTS:
        return IDENTS[name]
    if name in CUDA_RUNTIME_NAMES:
        return "musa" + name[4:], "runtime-api"
    for pattern, repl, rule in PREFIXES:
        m = pattern.match(name)
        if m:
            return repl + name[m.end() :], rule
    return None


def _port_identifier(name: str, offset: int, ctx: _Ctx) -> str:
    mapped = _map_identifier(name)
    if mapped is not None:
        if mapped[1] == "dnn":
            ctx.warn(offset, name, DNN_WARNING)
        return ctx.rewrite(mapped[1], name, mapped[0])
    for pattern, reason in IDENT_WARN:
        if pattern.match(name):
            ctx.warn(offset, name, reason)
            break
    return name


def _port_include(lead: str, opener: str, path: str, offset: int, ctx: _Ctx) -> str | None:
    mapped = INCLUDES.get(path.strip())
    if mapped is None:
        if INCLUDE_WARN.match(path.strip()):
            ctx.warn(offset, path.strip(), "CUDA header with no verified MUSA/torch_musa equivalent")
        return None
    new, quoted = mapped
    ctx.rewrite("header", path.strip(), new)
    return f'{lead}"{new}"' if quoted or opener == '"' else f"{lead}<{new}>"


def _port_qualified(ns: str, member: str, ctx: _Ctx) -> str:
    new_member = (_map_identifier(member) or (member, ""))[0]
    new_ns = "c10" if new_member in C10_MUSA_SYMBOLS else ns
    return ctx.rewrite("torch-namespace", f"{ns}::cuda::{member}", f"{new_ns}::musa::{new_member}")


def _port_cpp(text: str, ctx: _Ctx, base: int = 0) -> str:
    """Port C++/CUDA text; ``base`` is its offset in the whole input (for warning line numbers)."""
    out: list[str] = []
    last = 0
    for m in CPP_TOKEN.finditer(_escape_view(text)):
        start, end = m.span()

        def grp(name: str, m: re.Match[str] = m) -> str:  # groups from the original, not the escape view
            return text[slice(*m.span(name))]

        new: str | None
        if m.group("path") is not None:
            new = _port_include(grp("lead"), grp("open"), grp("path"), base + start, ctx)
        elif m.group("ns") is not None:
            new = _port_qualified(grp("ns"), grp("member"), ctx)
        elif m.group("devtype") is not None:
            new = ctx.rewrite("torch-device", "DeviceType::CUDA", grp("devtype") + "PrivateUse1")
        else:
            new = _port_identifier(grp("ident"), base + start, ctx)
        if new is not None and new != text[start:end]:
            out += [text[last:start], new]
            last = end
    out.append(text[last:])
    return "".join(out)


# ------------------------------------------------------------------------------------------------ Python
_SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)  # Python >= 3.12 splits f-strings into tokens
_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", -1)
_STRING = re.compile(r"(?P<prefix>[A-Za-z]*)(?P<quote>'''|\"\"\"|'|\")(?P<body>.*)(?P=quote)\Z", re.S)
_DEVICE = re.compile(r"cuda(?=:|\Z)")

Edit = tuple[int, int, str]


def _string_edit(tok: tokenize.TokenInfo, prev: tokenize.TokenInfo | None, text: str, ctx: _Ctx) -> Edit | None:
    s, e = ctx.offset(*tok.start), ctx.offset(*tok.end)
    if text[s:e] != tok.string:  # positions that do not index the text are never edited
        return None
    if tok.type == _FSTRING_MIDDLE:
        body, body_start, prefix = tok.string, s, "f"
        is_first = prev is not None and prev.type == _FSTRING_START
    else:
        m = _STRING.match(tok.string)
        if m is None:
            return None
        body, body_start, prefix, is_first = m.group("body"), s + m.start("body"), m.group("prefix"), True
    if "b" in prefix.lower():
        return None
    if is_first and _DEVICE.match(body) and "\n" not in body:
        ctx.device_used = True
        ctx.rewrite("device-string", '"cuda"', '"musa"')
        return body_start, body_start + 4, "musa"
    if "\n" not in body:
        for flag in NVCC_FLAG.findall(body):
            ctx.warn(body_start, flag, NVCC_FLAG_WARNING)
    new = _port_cpp(body, ctx, body_start)
    return (body_start, body_start + len(body), new) if new != body else None


def _name_edit(toks: list[tokenize.TokenInfo], i: int, ctx: _Ctx) -> str | None:
    name, offset = toks[i].string, ctx.offset(*toks[i].start)
    prev = toks[i - 1].string if i >= 1 else ""
    prev2 = toks[i - 2].string if i >= 2 else ""
    if prev == "." and prev2 == "backends" and name in ("cuda", "cudnn"):
        ctx.warn(offset, f"torch.backends.{name}", "no verified torch_musa equivalent; remove or guard it")
        return None
    if prev == "." and name in PY_ATTRS:
        ctx.device_used = True
        qual = "torch." if prev2 == "torch" else "."
        ctx.rewrite("python-device-api", qual + name, qual + PY_ATTRS[name])
        return PY_ATTRS[name]
    if name in PY_LOADER_NAMES:
        ctx.device_used = True
        return ctx.rewrite("loader-arg", name, PY_LOADER_NAMES[name])
    return None


def _import_edits(toks: list[tokenize.TokenInfo], all_toks: list[tokenize.TokenInfo], ctx: _Ctx) -> list[Edit]:
    """Edits for ``torch.utils.cpp_extension`` chains and ``from torch.utils import cpp_extension``."""
    edits: list[Edit] = []
    words = [t.string for t in toks]
    for i in range(len(toks)):
        if words[i : i + 5] == ["torch", ".", "utils", ".", "cpp_extension"]:
            edits.append((ctx.offset(*toks[i].start), ctx.offset(*toks[i + 4].end), MUSA_EXTENSION))
        elif words[i : i + 6] == ["from", "torch", ".", "utils", "import", "cpp_extension"]:
            nxt = all_toks[all_toks.index(toks[i + 5]) + 1].string
            if nxt == ",":
                ctx.warn(ctx.offset(*toks[i].start), "from torch.utils import", "import cpp_extension on its own line")
                continue
            alias = "musa_extension" if nxt == "as" else "musa_extension as cpp_extension"
            edits.append((ctx.offset(*toks[i + 1].start), ctx.offset(*toks[i + 3].end), "torch_musa.utils"))
            edits.append((ctx.offset(*toks[i + 5].start), ctx.offset(*toks[i + 5].end), alias))
        else:
            continue
        ctx.device_used = True
        ctx.rewrite("loader-import", "torch.utils.cpp_extension", MUSA_EXTENSION)
    return edits


def _port_python(text: str, ctx: _Ctx) -> str:
    all_toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    toks = [t for t in all_toks if t.type not in _SKIP]
    edits = _import_edits(toks, all_toks, ctx)
    for i, tok in enumerate(toks):
        edit: Edit | None = None
        if tok.type in (tokenize.STRING, _FSTRING_MIDDLE):
            edit = _string_edit(tok, toks[i - 1] if i else None, text, ctx)
        elif tok.type == tokenize.NAME:
            new = _name_edit(toks, i, ctx)
            edit = (ctx.offset(*tok.start), ctx.offset(*tok.end), new) if new is not None else None
        if edit is not None:
            edits.append(edit)
    for s, e, new in sorted(edits, reverse=True):
        text = text[:s] + new + text[e:]
    return text


def _add_torch_musa_import(text: str, ctx: _Ctx) -> str:
    """Insert ``import torch_musa`` after ``import torch`` (else after the leading imports)."""
    if not ctx.device_used or re.search(r"^import torch_musa[ \t]*(#.*)?$", text, re.M):
        return text
    try:
        body = ast.parse(text).body
    except SyntaxError:
        ctx.warn(0, "import torch_musa", "the file does not parse; add `import torch_musa` by hand")
        return text
    after = 0
    for node in body:
        if isinstance(node, ast.Import) and any(a.name == "torch" for a in node.names):
            after = node.end_lineno or node.lineno
            break
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            after = node.end_lineno or node.lineno
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break
    lines = text.splitlines(keepends=True)
    lines.insert(after, "import torch_musa\n")
    ctx.rewrite("import", "", "import torch_musa")
    return "".join(lines)


# ------------------------------------------------------------------------------------------------ API
_KINDS = {"auto": "auto", "python": "python", "py": "python", "cuda": "cuda", "cu": "cuda", "cpp": "cuda"}
_CUDA_SUFFIXES = {".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp"}


def _detect_kind(text: str) -> str:
    try:
        ast.parse(text)
        return "python"
    except SyntaxError:
        return "python" if re.search(r"^(import|from)[ \t]+[\w.]+", text, re.M) else "cuda"


def port_source(text: str, *, kind: str = "auto") -> PortResult:
    """Port CUDA source text to MUSA.

    Args:
        text: A CUDA candidate (Python with ``load_inline`` and CUDA source strings), a reference
            program, or raw CUDA/C++ source.
        kind: ``auto`` (Python when it parses or has ``import`` lines), ``python`` or ``cuda``.

    Returns:
        The ported text, the renames applied with counts, and warnings for constructs left unchanged.

    Raises:
        ConfigError: ``kind`` is not one of the above.
    """
    if kind not in _KINDS:
        raise ConfigError(f"kind must be one of {sorted(_KINDS)}, got {kind!r}")
    resolved = _detect_kind(text) if _KINDS[kind] == "auto" else _KINDS[kind]
    ctx = _Ctx(text)
    if resolved == "python":
        try:
            ported = _add_torch_musa_import(_port_python(text, ctx), ctx)
        except (tokenize.TokenError, SyntaxError) as exc:  # e.g. an unterminated string: C++ renames only
            ctx = _Ctx(text)
            ctx.warn(0, "<python>", f"tokenize failed ({exc}); only C++ renames were applied")
            ported = _port_cpp(text, ctx)
    else:
        ported = _port_cpp(text, ctx)
    rewrites = tuple(Rewrite(r, b, a, n) for (r, b, a), n in sorted(ctx.counts.items()))
    warnings = tuple(sorted(ctx.warnings.values(), key=lambda w: (w.line, w.construct)))
    return PortResult(text=ported, kind=resolved, rewrites=rewrites, warnings=warnings)


def port_file(path: str | Path, out_path: str | Path | None = None, *, kind: str = "auto") -> PortResult:
    """Port a file and write the result to ``out_path`` when given.

    C++ suffixes (``.cu``, ``.cuh``, ``.cpp``, ...) are read as ``cuda`` and ``.py`` as ``python`` unless
    ``kind`` says otherwise. torch_musa's loader treats only ``.mu``/``.muh`` files as MUSA sources, so a
    ported ``.cu`` wants an ``out_path`` ending in ``.mu``.
    """
    src = Path(path)
    if kind == "auto":
        kind = "cuda" if src.suffix in _CUDA_SUFFIXES else "python" if src.suffix == ".py" else "auto"
    result = port_source(src.read_text(encoding="utf-8"), kind=kind)
    if out_path is not None:
        Path(out_path).write_text(result.text, encoding="utf-8")
        logger.info(
            "ported %s -> %s: %d rewrites, %d warnings", src, out_path, len(result.rewrites), len(result.warnings)
        )
    return result


# ------------------------------------------------------------------------------------------------ CLI
_CLI_HELP = "Port a CUDA candidate, reference program or .cu file to MUSA (torch_musa)."


def _add_port_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", choices=["musa"], default="musa", help="target backend (only musa)")
    parser.add_argument("file", help="CUDA candidate (.py), reference program or raw .cu file")
    parser.add_argument("-o", "--output", default=None, help="write the ported file here (default: stdout)")
    parser.add_argument("--kind", choices=["auto", "python", "cuda"], default="auto", help="how to read FILE")


def run_port(args: argparse.Namespace) -> int:
    """Handler of ``musaenv port``: port, write or print, report to stderr; returns the exit code."""
    try:
        result = port_file(args.file, args.output, kind=args.kind)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"musaenv port: {exc}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.write(result.text)
    for r in result.rewrites:
        print(f"rewrote {r.count}x [{r.rule}] {r.before or '-'} -> {r.after}", file=sys.stderr)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def add_port_subparser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``port`` on an ``argparse`` subparsers object; its handler is set as ``args.func``."""
    parser: argparse.ArgumentParser = subparsers.add_parser("port", help=_CLI_HELP, description=_CLI_HELP)
    _add_port_args(parser)
    parser.set_defaults(func=run_port)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Standalone ``musaenv port``: ``main(["--to", "musa", "cand.py", "-o", "cand_musa.py"])``."""
    parser = argparse.ArgumentParser(prog="musaenv port", description=_CLI_HELP)
    _add_port_args(parser)
    return run_port(parser.parse_args(argv))
