"""A candidate's compile may write its private build directory only, not the shared header store."""

from __future__ import annotations

from pathlib import Path

import pytest

from musaenv.isolation.sandbox import landlock_abi
from musaenv.toolchains.cpp.compiler import run_tool
from musaenv.toolchains.cpp.fastbuild import _writes_only


@pytest.mark.skipif(landlock_abi() <= 0, reason="Landlock unsupported by this kernel")
def test_compiler_processes_write_only_their_build_directory(tmp_path: Path) -> None:
    build, store = tmp_path / "build", tmp_path / "pch"
    build.mkdir()
    store.mkdir()
    (store / "musaenv_pch.h.gch").write_text("a header")
    script = f"echo ok > {build}/out.o && echo pwned > {store}/musaenv_pch.h.gch"
    rc, out = run_tool(["sh", "-c", script], build, 30, preexec=_writes_only(build))
    assert (build / "out.o").read_text() == "ok\n"
    assert rc != 0 and "ermission denied" in out
    assert (store / "musaenv_pch.h.gch").read_text() == "a header"
    rc, _ = run_tool(["sh", "-c", f"echo ok > {store}/later"], build, 30)  # the builder itself still may
    assert rc == 0
