"""The fast path links with gold where binutils has it, and with the default linker when gold cannot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from musaenv.toolchains.cpp import fastbuild
from musaenv.toolchains.cpp.compiler import CompileFlags

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _object(tmp_path: Path) -> Path:
    (tmp_path / "a.cpp").write_text('extern "C" int musaenv_answer() { return 42; }\n')
    subprocess.run(["g++", "-fPIC", "-c", "a.cpp", "-o", "a.o"], cwd=tmp_path, check=True)
    return tmp_path / "a.o"


@needs_gxx
@pytest.mark.parametrize("gold", [["-fuse-ld=musaenv-no-such-linker"], []])
def test_a_failed_fast_link_falls_back_to_the_default_linker(tmp_path: Path, monkeypatch, gold: list[str]) -> None:
    monkeypatch.setattr(fastbuild, "_gold", lambda: gold)
    flags = CompileFlags(("g++",), (), ("-shared",))
    rc, out = fastbuild._link(flags, [_object(tmp_path)], tmp_path / "m.so", tmp_path)
    assert rc == 0, out
    syms = subprocess.run(["nm", "-D", str(tmp_path / "m.so")], capture_output=True, text=True, check=True).stdout
    assert "musaenv_answer" in syms


@needs_gxx
def test_the_candidates_own_linker_choice_is_kept(tmp_path: Path, monkeypatch) -> None:
    seen: list[list[str]] = []
    real = fastbuild.run_tool

    def spy(cmd, *args, **kwargs):
        seen.append(list(cmd))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(fastbuild, "_gold", lambda: ["-fuse-ld=gold"])
    monkeypatch.setattr(fastbuild, "run_tool", spy)
    flags = CompileFlags(("g++",), (), ("-shared", "-fuse-ld=bfd"))
    rc, out = fastbuild._link(flags, [_object(tmp_path)], tmp_path / "m.so", tmp_path)
    assert rc == 0, out
    assert len(seen) == 1 and "-fuse-ld=gold" not in seen[0]
