"""What a build path is to the builder: a :class:`Toolchain` record, one per path, tried in one ordered list.

A new toolchain is one module that defines its record (``TOOLCHAIN``) and one line in
:data:`musaenv.toolchains.builder.TOOLCHAINS`. Kept apart from the builder so a toolchain's module can
name the record without importing the builder (no cycle); imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from musaenv.toolchains.job import CompileJob

__all__ = ["Build", "Toolchain"]

Build = Callable[[CompileJob, Path, list[dict[str, str]]], "dict[str, object] | None"]
"""A toolchain's build: the job, its private directory and the list it appends why it declined to; answers the
report's fields (:class:`~musaenv.toolchains.job.BuildReport`), or ``None`` when it declines the job."""


@dataclass(frozen=True)
class Toolchain:
    """One build path.

    Attributes:
        name: What the path is called in :data:`~musaenv.toolchains.builder.TOOLCHAINS` (the report's ``tier`` is
            the build's own word: a path may answer several tiers, the fast driver ``split`` or ``pch``).
        accepts: Which jobs it may take (a job it accepts it may still decline, with why).
        build: Its build of a loadable module, ``None`` when it has none (a check of sources only).
        compile_only: Its compile-only check (no device on this machine), ``None`` when it has none.
    """

    name: str
    accepts: Callable[[CompileJob], bool]
    build: Build | None = None
    compile_only: Build | None = None

    def runner(self, job: CompileJob) -> Build | None:
        """What this toolchain runs for ``job``: its check for a compile-only job, its build otherwise; ``None``
        when it has neither for the job or does not accept it."""
        run = self.compile_only if job.compile_only else self.build
        return run if run is not None and self.accepts(job) else None
