"""Extract a candidate program from an LLM response. No torch here.

Rule (MusaCoder's candidate format is one fenced python block): the *last* fenced code block whose code defines
``ModelNew`` wins; a response with no fence is taken whole when it parses as Python defining ``ModelNew``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["Extraction", "extract_candidate"]

# ``` or ~~~ fences, optional language tag; the closing fence may be missing at the end of a truncated response.
_FENCE_RE = re.compile(r"(?P<fence>```|~~~)[ \t]*(?P<lang>[\w+.-]*)[^\n]*\n(?P<code>.*?)(?:(?P=fence)|\Z)", re.DOTALL)
_PY_LANGS = {"", "python", "py", "python3"}


@dataclass(frozen=True)
class Extraction:
    """Result of :func:`extract_candidate`.

    Attributes:
        code: The candidate source, or ``None`` when nothing usable was found.
        error: Why extraction failed (a sentence for the policy), else ``None``.
        syntax_error: The Python syntax error of the chosen block, if any (``code`` is still set).
    """

    code: str | None
    error: str | None = None
    syntax_error: str | None = None


def _defines_modelnew(code: str) -> bool:
    return re.search(r"^\s*class\s+ModelNew\b", code, re.MULTILINE) is not None


def _syntax_error(code: str) -> str | None:
    try:
        ast.parse(code)
    except SyntaxError as e:
        return f"line {e.lineno}: {e.msg}"
    except (ValueError, RecursionError, MemoryError) as e:  # e.g. null bytes, absurd nesting
        return f"{type(e).__name__}: {e}"
    return None


def extract_candidate(text: object, max_chars: int = 200_000) -> Extraction:
    """Pull the candidate program out of a response.

    Args:
        text: The raw response. Anything that is not a ``str`` (bytes, None, numbers) is a format error.
        max_chars: Responses longer than this are refused without parsing.

    Returns:
        An :class:`Extraction`; never raises for bad input.
    """
    if isinstance(text, bytes):
        return Extraction(None, "the response is bytes, not text; send a str holding one fenced python code block")
    if not isinstance(text, str):
        return Extraction(None, f"the response is a {type(text).__name__}, not text")
    if len(text) > max_chars:
        return Extraction(None, f"the response is {len(text):,} characters long; the limit is {max_chars:,}")
    if "\x00" in text:
        return Extraction(None, "the response contains NUL bytes; it is not program text")
    if not text.strip():
        return Extraction(None, "the response is empty; send one fenced python code block defining ModelNew")
    blocks = [m.group("code") for m in _FENCE_RE.finditer(text) if m.group("lang").lower() in _PY_LANGS]
    candidates = [b for b in blocks if _defines_modelnew(b)]
    if candidates:
        code = candidates[-1]
    elif not blocks and _defines_modelnew(text):
        code = text
    else:
        where = "in any fenced python code block" if blocks else "in the response"
        return Extraction(None, f"no `class ModelNew` found {where}; define class ModelNew(nn.Module)")
    err = _syntax_error(code)
    return Extraction(code, None if err is None else f"the candidate is not valid Python ({err})", err)
