"""Reading a CUDA source's top level for the split (:mod:`musaenv.toolchains.cuda.split`): comments and literals
blanked, top-level declarations and preprocessor lines as chunks, and C language linkage opened up.

``extern "C"`` does not change where a declaration belongs (a kernel is device code, a launcher host code); it
changes only the symbol's name. So a declaration that spells it (``extern "C" __global__ void k(...)``) is placed
like the same declaration without it and carried as written, and an ``extern "C" { ... }`` block is opened into its
declarations, each placed on its own and carried inside a block of its own (``extern "C" {<declaration>}``), which
is what a linkage block means declaration by declaration. Any other linkage (``extern "C++"``), a block inside a
block, or a preprocessor line inside one is not opened: the source is built as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["blank", "chunks", "with_linkage"]

_LINKAGE = re.compile(r'\s*extern\s*"\s*"\s*')  # ``extern "C"`` in blanked code (the literal's letter blanked)
_ANY_LINKAGE = re.compile(r'\bextern\s*"')


@dataclass
class Chunk:
    text: str  # verbatim, comments included
    code: str  # comments and string literals blanked, for classification
    directive: bool = False
    line: int = 1  # line of the source its first character is on
    linkage: bool = False  # declared with C linkage (``extern "C"``, as a prefix or by a block around it)
    wrap: bool = False  # from inside an ``extern "C" { ... }`` block: carried inside one of its own

    @property
    def out(self) -> str:
        """The chunk as the split carries it (on the lines it had in the source)."""
        return f'extern "C" {{{self.text}}}' if self.wrap else self.text


def blank(text: str) -> str | None:
    """``text`` with comments and string/char literals replaced by spaces (newlines kept); None when unbalanced."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                return None
            j += 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\n":
                    return None
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return None
            j += 1
            out.append(c + "".join(" " if ch != "\n" else ch for ch in text[i + 1 : j - 1]) + c)
            i = j
            continue
        else:
            out.append(c)
            i += 1
            continue
        out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
        i = j
    return "".join(out)


def chunks(text: str, code: str) -> list[Chunk] | None:
    """Top-level declarations and preprocessor lines, in order (``code`` is ``text`` blanked, same offsets)."""
    found: list[Chunk] = []
    i, n, start, depth = 0, len(code), 0, 0
    while i < n:
        c = code[i]
        if depth == 0 and c == "#" and not code[start:i].strip():
            j = i
            while True:  # a directive runs to an unescaped newline
                k = code.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and code[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            found.append(Chunk(text[i:k], code[i:k], True, code.count("\n", 0, i) + 1))
            i = start = k
            continue
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0 and c == "}" and _ends_at_brace(code, start, i):
                found.append(Chunk(text[start : i + 1], code[start : i + 1], line=code.count("\n", 0, start) + 1))
                start = i + 1
        elif c == ";" and depth == 0:
            found.append(Chunk(text[start : i + 1], code[start : i + 1], line=code.count("\n", 0, start) + 1))
            start = i + 1
        i += 1
    if depth != 0 or code[start:].strip():
        return None
    return found


def _ends_at_brace(code: str, start: int, close: int) -> bool:
    """A ``}`` at depth 0 ends a function body; a class or an initialiser goes on to its ``;``."""
    head = code[start : code.find("{", start)]
    if _LINKAGE.fullmatch(head):
        return True  # an ``extern "C" { ... }`` block
    if code[close + 1 :].lstrip().startswith(";"):
        return False  # the ';' closes it
    return ")" in head and not re.match(r"\s*(template\s*<.*>\s*)?(struct|class|union|enum|typedef)\b", head, re.S)


def with_linkage(top: list[Chunk]) -> list[Chunk] | None:
    """``top`` with each ``extern "C" { ... }`` block opened into its declarations (``wrap``) and each
    ``extern "C"`` prefix blanked from the code it is classified by (``linkage``; its text keeps it); ``None`` for
    another linkage, a linkage spelled anywhere but at a declaration's start, a nested block, or a preprocessor line
    inside a block."""
    out: list[Chunk] = []
    for c in top:
        m = None if c.directive else _LINKAGE.match(c.code)
        if m is None:
            if not c.directive and _ANY_LINKAGE.search(c.code):
                return None
            out.append(c)
            continue
        if c.text[: m.end()].split('"')[1] != "C" or _ANY_LINKAGE.search(c.code, m.end()):
            return None  # extern "C++", or a linkage nested in this declaration
        if not c.code.startswith("{", m.end()):
            out.append(Chunk(c.text, " " * m.end() + c.code[m.end() :], line=c.line, linkage=True))
            continue
        close = c.code.rindex("}")
        inner = chunks(c.text[m.end() + 1 : close], c.code[m.end() + 1 : close])
        if inner is None or any(s.directive for s in inner):
            return None
        base = c.line + c.code.count("\n", 0, m.end() + 1) - 1
        out += [Chunk(s.text, s.code, line=base + s.line, linkage=True, wrap=True) for s in inner]
    return out
