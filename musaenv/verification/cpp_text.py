"""C++ source text for the static checks (:mod:`musaenv.verification.static_cpp`): comments and literals blanked
with offsets kept, continued lines spliced, include and conditional directives removed, the system preprocessor
run and its output mapped back to the input's line numbers.

Split from ``static_cpp`` (the checks themselves) because this part knows nothing of torch or of findings: it only
turns a source into text whose every offset still names the line the candidate wrote.
"""

from __future__ import annotations

import bisect
import re
import shutil
import subprocess

__all__ = ["PREPROCESS_TIMEOUT_S", "Lines", "directives", "lex", "mapped_output", "run_preprocessor", "splice"]

PREPROCESS_TIMEOUT_S = 10.0

_LEX_RE = re.compile(
    r"""(?P<lc>//[^\n]*)
      |(?P<bc>/\*.*?\*/)
      |(?P<raw>\b(?:u8|u|U|L)?R"(?P<d>[^()\\\s"]{0,16})\(.*?\)(?P=d)")
      |(?P<num>\.?\d(?:[eEpP][+-]|'(?=\w)|[\w.])*)
      |(?P<str>(?:\b(?:u8|u|U|L))?"(?:\\.|[^"\\\n])*")
      |(?P<chr>(?:\b(?:u8|u|U|L))?'(?:\\.|[^'\\\n])*')
      |(?P<id>[A-Za-z_]\w*)""",
    re.S | re.X,
)
_DIRECTIVE_RE = re.compile(r"[ \t]*(?:#|%:)[ \t]*(\w+)[ \t]*(.*)$")
_CONDITIONAL = frozenset({"if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif", "error", "warning",
                          "line", "embed"})  # fmt: skip


def lex(text: str, keep_strings: bool) -> tuple[str, list[tuple[str, int]]]:
    """Blank comments (and, unless ``keep_strings``, string/char literals), keeping offsets and line breaks.

    Returns the new text and the string literals' contents with their offsets.
    """
    strings: list[tuple[str, int]] = []

    def repl(m: re.Match[str]) -> str:
        kind = m.lastgroup
        s = m.group(0)
        if kind in ("lc", "bc"):
            return re.sub(r"[^\n]", " ", s)
        if kind in ("raw", "str", "chr"):
            strings.append((s, m.start()))
            return s if keep_strings else re.sub(r"[^\n]", " ", s)
        return s

    return _LEX_RE.sub(repl, text), strings


def splice(text: str) -> str:
    """Join backslash-continued lines, padding with newlines so later lines keep their numbers."""
    out: list[str] = []
    pending = 0
    for line in text.split("\n"):
        if line.endswith("\\"):
            out.append(line[:-1])
            pending += 1
            continue
        out.append(line + "\n" * pending if pending else line)
        pending = 0
        out.append("\n")
    return "".join(out)


class Lines:
    """Offset -> line number of a text whose lines may carry their own numbers."""

    def __init__(self, text: str, numbers: list[int] | None = None) -> None:
        self.starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        self.numbers = numbers

    def __call__(self, offset: int) -> int:
        idx = bisect.bisect_right(self.starts, offset) - 1
        if self.numbers is None:
            return idx + 1
        return self.numbers[min(idx, len(self.numbers) - 1)] if self.numbers else 1


def directives(code: str) -> tuple[str, list[tuple[str, int]], dict[str, list[int]]]:
    """Blank include and conditional lines; return the text, the includes (with lines) and each #define's lines."""
    lines = code.split("\n")
    includes: list[tuple[str, int]] = []
    defines: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        m = _DIRECTIVE_RE.match(line)
        if m is None:
            continue
        name, rest = m.group(1), m.group(2).strip()
        if name in ("include", "include_next", "import"):
            includes.append((rest, i + 1))
            lines[i] = ""
        elif name in _CONDITIONAL:
            lines[i] = ""
        elif name == "define" and (dm := re.match(r"\w+", rest)):
            defines.setdefault(dm.group(0), []).append(i)
    return "\n".join(lines), includes, defines


def run_preprocessor(text: str, kind: str, defines: list[str]) -> tuple[str | None, str]:
    """Run ``g++ -E`` on ``text``; return (output or None, problem description or "")."""
    gxx = shutil.which("g++") or shutil.which("c++")
    if gxx is None:
        return None, "no C++ preprocessor (g++) on this machine"
    cmd = [gxx, "-E", "-x", "c++", "-std=gnu++17", "-nostdinc", "-w", "-DTORCH_EXTENSION_NAME=candidate_ext"]
    if kind in ("cuda", "musa"):
        cmd += ["-D__CUDACC__", "-D__NVCC__", "-D__CUDA_ARCH__=800", "-D__MUSACC__", "-D__MUSA_ARCH__=220"]
    cmd += [*defines, "-"]
    try:
        proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=PREPROCESS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"the C++ preprocessor failed ({type(e).__name__})"
    problem = ""
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:200])
        problem = f"the C++ preprocessor reported an error ({first.strip()[:200]})"
    return (proc.stdout if proc.stdout else None), problem


def mapped_output(out: str) -> tuple[str, Lines]:
    """Drop line markers and pragmas from ``g++ -E`` output, keeping each line's number in the input."""
    lines: list[str] = []
    numbers: list[int] = []
    cur: int | None = None
    for line in out.split("\n"):
        m = re.match(r'#\s*(\d+)\s+"([^"]*)"', line)
        if m:
            cur = int(m.group(1)) if m.group(2) == "<stdin>" else None
            continue
        if cur is not None:
            if not line.lstrip().startswith("#"):
                lines.append(line)
                numbers.append(cur)
            cur += 1
    text = "\n".join(lines)
    return text, Lines(text, numbers)
