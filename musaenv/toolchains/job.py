"""The builder's job file and its answer: ``spec.json`` in, ``result.json`` out, as typed records.

The build service (:mod:`musaenv.toolchains.loader`, :mod:`musaenv.toolchains.warmup`) writes one job into a builder's
private directory and starts :mod:`musaenv.toolchains.builder` on it; the builder writes one :class:`BuildReport` back.
Both are records of :mod:`musaenv.isolation.records`: ``from_dict`` rejects an unknown, a missing or a mistyped
field with a :class:`ProtocolError`. Each carries :data:`JOB_VERSION`; a builder and a parent of different
versions (other musaenv code on the builder's path) never guess at each other's keys: the mismatch comes back as
an ``infra`` report naming both versions, which the parent turns into an ``infra_error`` build, never the
candidate's ``compile_error``. Kept in ``toolchains/`` beside its two users; it imports nothing heavy (the builder's
start stays cheap).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.isolation.records import Message, ProtocolError

__all__ = ["JOB_VERSION", "BuildReport", "CompileJob", "JobMismatch", "WarmupJob", "read_job", "read_report"]

JOB_VERSION = 2  # 2: BuildReport.declined
"""Change with any change of :class:`CompileJob`, :class:`WarmupJob` or :class:`BuildReport`."""


class JobMismatch(ProtocolError):
    """The job file or the report of a builder speaks another job version."""

    def __init__(self, what: str, theirs: object) -> None:
        super().__init__(
            f"the builder's {what} is job version {theirs!r}, this code speaks version {JOB_VERSION}: the builder "
            "and the evaluator run different musaenv code (check PYTHONPATH and the evaluator's working directory)"
        )
        self.theirs = theirs


@dataclass(frozen=True)
class CompileJob(Message):
    """Build one :class:`~musaenv.toolchains.buildspec.BuildSpec` (or compile-check it, ``compile_only``).

    Attributes:
        version: :data:`JOB_VERSION` of the writer.
        name: The module's name (its content hash).
        cpp_sources, cuda_sources, functions, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths,
            with_cuda, backend, compile_only: The build spec's fields, as JSON.
        build_mode: One of :data:`musaenv.toolchains.loader.BUILD_MODES` (``fast``, ``torch``, ``clang``...).
        pch_cache: The header store the fast builds use (writable to the builder).
        timeout_s: CPU seconds the build may use.
        parent_pid: The build service's pid (the builder dies with it).
        confine: False only to measure the confinement's cost (``configure_builds(confine=False)``).
    """

    TYPE = "compile"
    version: int
    name: str
    cpp_sources: list[str]
    cuda_sources: list[str]
    functions: list[str] | dict[str, Any] | None
    extra_cflags: list[str]
    extra_cuda_cflags: list[str]
    extra_ldflags: list[str]
    extra_include_paths: list[str]
    with_cuda: bool | None
    backend: str
    compile_only: bool
    build_mode: str
    pch_cache: str
    timeout_s: float
    parent_pid: int
    confine: bool

    @classmethod
    def of(cls, spec: dict[str, Any], **job: Any) -> CompileJob:
        """The job for a build spec (``BuildSpec.to_dict()``) and the job's own fields (``name``, ``build_mode``...).

        Raises:
            ProtocolError: a field is missing, unknown or of the wrong type.
        """
        fields = {k: list(v) if isinstance(v, tuple) else v for k, v in spec.items()}
        return cls.from_dict({"type": cls.TYPE, "version": JOB_VERSION, **fields, **job})

    def spec(self) -> dict[str, Any]:
        """The job as the build drivers read it (:mod:`.cpp.fastbuild`, :mod:`.cuda.fast`): a flat dict."""
        return self.to_dict()


@dataclass(frozen=True)
class WarmupJob(Message):
    """Build our own precompiled headers and binding objects (:func:`musaenv.toolchains.warmup.run_items`).

    Attributes:
        version: :data:`JOB_VERSION` of the writer.
        items: What to build, in order (``kind``, ``extra_cflags``, optionally ``extra_include_paths``).
        pch_cache: The header store (writable to the builder).
        timeout_s: CPU seconds the whole job may use.
        parent_pid: The pid of the process that started it (the builder dies with it).
        background: Run at low priority, behind the candidates' builds.
    """

    TYPE = "warmup"
    version: int
    items: list[dict[str, Any]]
    pch_cache: str
    timeout_s: float
    parent_pid: int
    background: bool


@dataclass(frozen=True)
class BuildReport(Message):
    """What a builder answers (``result.json``).

    Attributes:
        version: :data:`JOB_VERSION` of the builder.
        ok: The module was built (or the compile-only check passed, or every warm-up item was built).
        log: The compiler's output or why the build failed.
        tier: Which path built it (``fast``, ``pch``, ``torch``, ``cuda_split``, ``musa``, ``compile_only``,
            ``warmup``; empty when the builder failed before choosing).
        infra: The machine or the harness failed (a missing toolchain, a job of another version), not the sources.
        steps: What ran (compiler steps with exit codes and seconds).
        wanted: Headers the build went without (built in the background for the next one).
        retire: Header directories the compiler refused for an empty unit with the build's flags (the parent
            retires them: :func:`musaenv.toolchains.cpp.pch.retire_headers`).
        rows: One row per warm-up item.
        inconclusive: Why a compile-only check could not judge the source (empty when it could).
        declined: The faster paths that did not apply, in the order tried, each ``{"tier", "why"}``
            (:func:`musaenv.types.declined`).
        confinement: How the builder was confined (:func:`musaenv.isolation.build_jail.run_confined`).
    """

    TYPE = "build_report"
    version: int = JOB_VERSION
    ok: bool = False
    log: str = ""
    tier: str = ""
    infra: bool = False
    steps: list[Any] = field(default_factory=list)
    wanted: list[str] = field(default_factory=list)
    retire: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    inconclusive: str = ""
    declined: list[dict[str, str]] = field(default_factory=list)
    confinement: dict[str, Any] = field(default_factory=dict)


def _versioned(d: Any, what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ProtocolError(f"the builder's {what} is not a JSON object")
    if d.get("version") != JOB_VERSION:
        raise JobMismatch(what, d.get("version"))
    return d


def read_job(path: Path) -> CompileJob | WarmupJob:
    """Parse a job file.

    Raises:
        JobMismatch: the job is of another :data:`JOB_VERSION` (or has none).
        ProtocolError: it is no job of this version (unknown type, unknown, missing or mistyped fields).
        OSError, ValueError: it cannot be read, or is no JSON.
    """
    d = _versioned(json.loads(path.read_text()), "job")
    if d.get("type") == WarmupJob.TYPE:
        return WarmupJob.from_dict(d)
    return CompileJob.from_dict(d)


def read_report(path: Path) -> BuildReport | None:
    """Parse a builder's report; ``None`` when there is none (the builder died before writing it, which it does
    last) or it is not even JSON (cut short).

    Raises:
        JobMismatch: the report is of another :data:`JOB_VERSION` (or has none).
        ProtocolError: it has unknown, missing or mistyped fields.
    """
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return BuildReport.from_dict(_versioned(d, "report"))
