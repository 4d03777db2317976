"""C++ source text for the static checks (musaenv.verification.cpp_text): every offset keeps its line."""

from __future__ import annotations

import shutil

import pytest

from musaenv.verification.cpp_text import Lines, directives, lex, mapped_output, run_preprocessor, splice


def test_lex_blanks_comments_and_literals_keeping_offsets_and_lines() -> None:
    text = 'int a; // at::matmul\n/* x\n y */ const char* s = "at::mm";\n'
    code, strings = lex(text, keep_strings=False)
    assert len(code) == len(text) and code.count("\n") == text.count("\n")
    assert "matmul" not in code and "at::mm" not in code and "int a;" in code
    assert strings == [('"at::mm"', text.index('"at::mm"'))]
    kept, _ = lex(text, keep_strings=True)
    assert '"at::mm"' in kept and "matmul" not in kept


def test_splice_joins_continued_lines_and_keeps_later_line_numbers() -> None:
    out = splice("#define M(a) \\\n  a##b\nint x;\n")
    assert out.split("\n")[0] == "#define M(a)   a##b" and out.split("\n")[2] == "int x;"


def test_directives_drop_includes_and_conditionals_and_list_defines() -> None:
    code, includes, defines = directives("#include <torch/extension.h>\n#if 0\n#define F 1\n#endif\nint y;\n")
    assert includes == [("<torch/extension.h>", 1)] and defines == {"F": [2]}
    assert code.split("\n") == ["", "", "#define F 1", "", "int y;", ""]


def test_lines_maps_offsets_to_given_numbers() -> None:
    lines = Lines("a\nb\nc", numbers=[10, 20, 30])
    assert [lines(0), lines(2), lines(4)] == [10, 20, 30]
    assert Lines("a\nb")(2) == 2


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs g++")
def test_preprocessor_output_maps_back_to_input_lines() -> None:
    out, problem = run_preprocessor("#define CAT(a, b) a##b\n\nint v = CAT(at::mat, mul)(x);\n", "cpp", [])
    assert problem == "" and out is not None
    text, line_of = mapped_output(out)
    assert "at::matmul" in text and line_of(text.index("at::matmul")) == 3
