"""Build script for the optional C++ helper ``musaenv._guard`` (csrc/guard.cpp).

Project metadata lives in pyproject.toml; this file only adds the extension. The extension is optional: when it
cannot be built (no compiler, not Linux, pybind11 missing) the install still succeeds and
:mod:`musaenv.isolation.sandbox` uses its pure-Python (ctypes) fallback. The build never needs torch.
"""

from __future__ import annotations

import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """``build_ext`` that warns instead of failing when an extension cannot be compiled."""

    _failed: tuple[str, ...] = ()

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any compiler/platform failure must leave the pure-Python install intact
            self._warn(f"C++ extensions skipped: {exc}")

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # same reason as above, per extension
            self._failed = (*self._failed, ext.name)
            self._warn(f"{ext.name} not built ({exc}); the pure-Python fallback will be used")

    def copy_extensions_to_source(self) -> None:  # --inplace / editable: copy only what was built
        built = [e for e in self.extensions if e.name not in self._failed]  # type: ignore[has-type]
        self.extensions = built
        super().copy_extensions_to_source()

    @staticmethod
    def _warn(msg: str) -> None:
        sys.stderr.write(f"WARNING: {msg}\n")


def _extensions() -> list[Any]:
    if not sys.platform.startswith("linux"):
        return []  # seccomp and Landlock are Linux-only
    try:
        from pybind11.setup_helpers import Pybind11Extension
    except ImportError:
        sys.stderr.write("WARNING: pybind11 not importable; musaenv._guard not built\n")
        return []
    return [Pybind11Extension("musaenv._guard", ["csrc/guard.cpp"], cxx_std=17)]


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
