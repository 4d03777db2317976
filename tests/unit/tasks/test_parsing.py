"""Extracting the candidate from LLM responses."""

from __future__ import annotations

import pytest

from musaenv.tasks.parsing import extract_candidate

GOOD = "import torch\nclass ModelNew:\n    pass\n"


def test_last_fenced_block_defining_modelnew_wins():
    text = f"Plan:\n```python\n{GOOD}```\nBetter:\n```py\n{GOOD}x = 2\n```\n```python\nprint('other')\n```"
    assert extract_candidate(text).code == GOOD + "x = 2\n"


def test_plain_code_without_fence_is_taken_whole():
    assert extract_candidate(GOOD).code == GOOD


def test_unterminated_fence_at_end_is_accepted():
    assert extract_candidate(f"```python\n{GOOD}").code == GOOD


def test_non_python_fences_are_ignored():
    text = f"```cpp\nclass ModelNew {{}};\n```\n```python\n{GOOD}```"
    assert extract_candidate(text).code == GOOD


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("just words", "no `class ModelNew`"),
        (b"bytes", "bytes"),
        (None, "NoneType"),
        ("a\x00b", "NUL"),
        ("x" * 300_001, "limit"),
    ],
)
def test_unusable_responses_explain_why(text, needle):
    ext = extract_candidate(text, max_chars=300_000)
    assert ext.code is None and needle in (ext.error or "")


def test_syntax_error_is_reported_with_line():
    ext = extract_candidate("```python\nclass ModelNew(:\n    pass\n```")
    assert ext.code is not None and ext.syntax_error is not None and "line 1" in ext.error
