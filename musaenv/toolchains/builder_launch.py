"""The command line that starts a builder (:mod:`musaenv.toolchains.builder`).

Its own module because both the build service (:mod:`musaenv.toolchains.loader`) and the header warm-up
(:mod:`musaenv.toolchains.warmup`) start builders, and the builder itself runs warm-up jobs: the launch line cannot live
in either without an import cycle.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["BUILDER_MODULE", "builder_command"]

#: The module a builder runs as ``__main__`` (kill tests and process-tree checks look for it on the command line).
BUILDER_MODULE = "musaenv.toolchains.builder"

# The builder runs as ``__main__`` under a bare ``musaenv`` package object: ``musaenv/__init__`` registers the envs
# with Gymnasium, which imports NumPy (~0.15 s of CPU, a twentieth of a cached build) that no build needs. Builds
# import submodules only (``from musaenv import _env`` finds the submodule through the package's ``__path__``).
_LAUNCH = (
    "import runpy, sys, types\n"
    "pkg = types.ModuleType('musaenv'); pkg.__path__ = [sys.argv[1]]; sys.modules['musaenv'] = pkg\n"
    "mod = sys.argv[2]; sys.argv = [mod, *sys.argv[3:]]\n"
    "runpy.run_module(mod, run_name='__main__', alter_sys=True)\n"
)


def builder_command(tmp: Path) -> list[str]:
    """The command line of a builder on ``tmp`` (its cmdline names the builder module, as ``-m`` would)."""
    return [sys.executable, "-c", _LAUNCH, str(Path(__file__).resolve().parents[1]), BUILDER_MODULE, str(tmp)]
