"""clang++ as a candidate's C++ compiler, when the configuration asks for it: ``configure_builds(mode="clang")``
(or ``build_extension(..., mode="clang")``).

The second C++ compiler, added as one toolchain: this module and its line in
:data:`musaenv.toolchains.builder.TOOLCHAINS`. It builds through torch's ``load_inline``
(:func:`musaenv.toolchains.torch_inline.torch_build`, nothing of the candidate imported) with ``CXX`` naming
clang++, which torch's extension builder compiles and links with; the fast driver's precompiled headers are GCC's,
so this path uses none. It takes C++ jobs only: CUDA sources and compile-only checks go on to the next toolchain.
A machine without clang++ answers ``infra`` (the harness's configuration, never the candidate's compile error).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from musaenv.toolchains.job import CompileJob
from musaenv.toolchains.toolchain import Toolchain
from musaenv.toolchains.torch_inline import torch_build

__all__ = ["MODE", "TOOLCHAIN"]

MODE = "clang"
"""The build mode (:data:`musaenv.toolchains.loader.BUILD_MODES`) that asks for this toolchain."""

_MISSING = "build mode clang asks for clang++, and there is none on PATH here: install clang (apt-get install clang)"


@contextlib.contextmanager
def _compiler(cxx: str) -> Iterator[None]:
    """Name ``cxx`` as torch's C++ compiler (``CXX``, read by torch's extension builder) for one build."""
    before = os.environ.get("CXX")
    os.environ["CXX"] = cxx
    try:
        yield
    finally:
        if before is None:
            del os.environ["CXX"]
        else:
            os.environ["CXX"] = before


def _accepts(job: CompileJob) -> bool:
    return job.build_mode == MODE and not job.cuda_sources and not job.with_cuda


def _build(job: CompileJob, tmp: Path, declined: list[dict[str, str]]) -> dict[str, object]:
    cxx = shutil.which("clang++")
    if cxx is None:
        return {"ok": False, "log": _MISSING, "tier": MODE, "infra": True}
    with _compiler(cxx):
        return torch_build(job, tmp, tier=MODE)


TOOLCHAIN = Toolchain(MODE, _accepts, build=_build)
"""C++ compiled and linked by clang++ (Debian clang 14 measured here), on request only."""
