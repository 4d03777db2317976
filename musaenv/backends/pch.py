"""Torch's compile flags and precompiled headers of ``torch/extension.h``, kept in musaenv's cache.

Measured on the 2-core CI machine with g++ 12 and torch 2.13 (CPU time of one compile of the l1_relu solution
at ``-O3``): parsing ``torch/extension.h`` is ~23 s of a ~36 s compile; the rest is GCC's end-of-unit
instantiation of every template the headers left pending (~5-7 s, not saved in a PCH) and optimising the
pybind11 internals the headers force into every unit (~5 s); linking is ~0.4 s. A precompiled header removes the
parsing only (36 -> 14 s). :mod:`musaenv.backends.fastbuild` removes the rest by compiling the candidate's code
against ``torch/types.h`` (ATen and the torch factory functions, no pybind11: 3 s with its PCH) and binding it in
separately cached objects.

Everything here lives under ``<MUSAENV_CACHE_DIR>/pch``; torch's own ``use_pch`` writes into site-packages and
deletes the file on every ``load_inline(use_pch=False)``, so it is not used.

A precompiled header is only valid for the flags it was built with (GCC checks ``-O``-dependent macros such as
``__OPTIMIZE__``), so there is one per distinct (header, flags) pair, built once under an ``flock`` (released by
the kernel when a builder dies, so a killed build never leaves a lock behind) and renamed into place atomically.
Each is ~0.7-0.8 GB; :data:`MAX_PCH_SETS` bounds how many flag sets get one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import logging
import os
import shlex
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MAX_PCH_SETS", "CompileFlags", "PchStore", "file_lock", "run_tool", "torch_flags", "unique_suffix"]

log = logging.getLogger(__name__)

MAX_PCH_SETS = 6  # distinct flag sets with their own PCH (each ~0.8 GB on disk); more builds go without one
PCH_TIMEOUT_S = 600.0
# A build starts a missing PCH only with this much of its time limit left: the slowest PCH build seen on the
# loaded 2-core CI machine took 88 s wall (torch/extension.h), and the candidate's own compile must still fit.
PCH_MIN_BUDGET_S = 200.0
HEADERS = {"full": "torch/extension.h", "split": "torch/types.h"}

_NAME_MARK = "musaenv_mark_name"
_CFLAG_MARK = "-DMUSAENV_MARK_CFLAGS"
_INCLUDE_MARK = "/musaenv_mark_include"
_LDFLAG_MARK = "-Wl,--musaenv-mark-ldflags"


@dataclass(frozen=True)
class CompileFlags:
    """Compiler command pieces for one extension, exactly as torch's ninja file would have them.

    Attributes:
        cxx: The compiler command (``$CXX`` or ``c++``), split.
        cflags: Flags of the compile rule, including ``-DTORCH_EXTENSION_NAME=<name>`` and the candidate's flags.
        ldflags: Flags of the link rule (``-shared``, torch's libraries, the candidate's flags).
    """

    cxx: tuple[str, ...]
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]

    def pch_flags(self) -> tuple[str, ...]:
        """The flags that decide whether a precompiled header fits (the module name is irrelevant to it)."""
        return tuple(f for f in self.cflags if not f.startswith("-DTORCH_EXTENSION_NAME="))

    def key(self) -> str:
        """Content hash of the compiler and the PCH-relevant flags."""
        return hashlib.sha256(json.dumps([self.cxx, self.pch_flags()]).encode()).hexdigest()[:16]


def _split_user_flags(flags: Sequence[str]) -> list[str]:
    # torch strips each flag and joins them into a ninja variable that a shell splits again.
    joined = " ".join(f.strip() for f in flags)
    return shlex.split(joined) if joined else []


def _template_from_torch() -> dict[str, Any]:
    """Ask this torch for its compile and link flags by letting it write a ninja file with marker values."""
    import torch.utils.cpp_extension as ce

    def call(fn: Any, **values: Any) -> Any:
        params = inspect.signature(fn).parameters
        missing = [p for p, v in params.items() if p not in values and v.default is inspect.Parameter.empty]
        if missing:
            raise RuntimeError(f"{fn.__name__} wants {missing}; this torch is not supported by the fast builder")
        return fn(**{k: v for k, v in values.items() if k in params})

    common = {"with_cuda": False, "with_sycl": False, "verbose": False, "is_standalone": False}
    ldflags = call(ce._prepare_ldflags, extra_ldflags=[_LDFLAG_MARK], **common)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "main.cpp")
        Path(src).write_text("")
        path = os.path.join(d, "build.ninja")
        call(
            ce._write_ninja_file_to_build_library,
            path=path, name=_NAME_MARK, sources=[src], extra_cflags=[_CFLAG_MARK], extra_cuda_cflags=[],
            extra_sycl_cflags=[], extra_ldflags=ldflags, extra_include_paths=[_INCLUDE_MARK], **common,
        )  # fmt: skip
        text = Path(path).read_text()
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key in ("cxx", "cflags", "ldflags"):
            found[key] = value
    if set(found) != {"cxx", "cflags", "ldflags"}:
        raise RuntimeError(f"unexpected ninja file from torch: {text[:400]}")
    return {k: shlex.split(v) for k, v in found.items()}


def torch_flags(
    cache: Path, name: str, extra_cflags: Sequence[str], extra_ldflags: Sequence[str], include_paths: Sequence[str]
) -> CompileFlags:
    """Torch's compile/link flags for extension ``name`` (the template is computed once per toolchain, on disk).

    Raises:
        RuntimeError: torch's private flag helpers changed shape (callers fall back to ``load_inline``).
        ValueError: the candidate's flags do not split like a shell would split them.
    """
    from musaenv.backends.loader import toolchain_fingerprint

    fp = hashlib.sha256(toolchain_fingerprint().encode()).hexdigest()[:16]
    path = cache / f"flags-{fp}.json"
    try:
        tpl = json.loads(path.read_text())
    except (OSError, ValueError):
        tpl = _template_from_torch()
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{unique_suffix()}.tmp")
        tmp.write_text(json.dumps(tpl))
        os.replace(tmp, path)
    user_c, user_ld = _split_user_flags(extra_cflags), _split_user_flags(extra_ldflags)
    includes = [f"-I{os.path.abspath(p.strip())}" for p in include_paths]
    cflags: list[str] = []
    for f in tpl["cflags"]:
        if f == f"-DTORCH_EXTENSION_NAME={_NAME_MARK}":
            cflags.append(f"-DTORCH_EXTENSION_NAME={name}")
        elif f == _CFLAG_MARK:
            cflags.extend(user_c)
        elif f == f"-I{_INCLUDE_MARK}":
            cflags.extend(includes)
        else:
            cflags.append(f)
    ldflags: list[str] = []
    for f in tpl["ldflags"]:
        ldflags.extend(user_ld if f == _LDFLAG_MARK else [f])
    return CompileFlags(tuple(tpl["cxx"]), tuple(cflags), tuple(ldflags))


def run_tool(cmd: Sequence[str], cwd: Path, timeout_s: float = PCH_TIMEOUT_S) -> tuple[int, str]:
    """Run a compiler-like tool; returns (exit code, combined output). Raises ``OSError`` when it cannot start."""
    try:
        p = subprocess.run(list(cmd), cwd=str(cwd), capture_output=True, text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else str(e.stdout or "")
        return 124, out + f"\n{cmd[0]} timed out after {timeout_s:.0f} s"
    return p.returncode, (p.stdout or "") + (p.stderr or "")


def unique_suffix() -> str:
    """A file-name suffix no other builder uses: a confined build is pid 1 of its own namespace, so the pid alone
    is not unique (every builder would be ``1``)."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive ``flock`` on ``path``; the kernel drops it when the holder dies, so it can never go stale."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class PchStore:
    """Precompiled headers under ``<cache>/pch/<kind>-<flags key>/``.

    Args:
        root: The ``pch`` cache directory.
        max_sets: At most this many flag sets get headers; others compile without one.
        deadline: ``time.monotonic()`` by which the current build must end; a missing header is only built when
            at least :data:`PCH_MIN_BUDGET_S` remain (``None``: no limit).
    """

    def __init__(self, root: Path, max_sets: int = MAX_PCH_SETS, deadline: float | None = None) -> None:
        self.root = root
        self.max_sets = max_sets
        self.deadline = deadline

    def _dir(self, kind: str, flags: CompileFlags) -> Path:
        return self.root / f"{kind}-{flags.key()}"

    def include_flags(self, kind: str, flags: CompileFlags) -> list[str] | None:
        """``-include`` flags of a ready PCH for ``kind`` (``full`` or ``split``), building it first if needed.

        Returns ``None`` when no header can be had (failed before, too many flag sets, or the build failed).
        """
        d = self._dir(kind, flags)
        header = d / "musaenv_pch.h"
        if (d / "musaenv_pch.h.gch").exists():
            return ["-Winvalid-pch", "-include", str(header)]
        if (d / "failed.json").exists() or not self._has_budget():
            return None
        with file_lock(self.root / f".{d.name}.lock"):
            if (d / "musaenv_pch.h.gch").exists():
                return ["-Winvalid-pch", "-include", str(header)]
            if (d / "failed.json").exists() or self._full(d):
                return None
            return self._build(kind, flags, d, header)

    def _has_budget(self) -> bool:
        return self.deadline is None or self.deadline - time.monotonic() >= PCH_MIN_BUDGET_S

    def _full(self, d: Path) -> bool:
        sets = {p.name.split("-", 1)[1] for p in self.root.glob("*-*") if (p / "musaenv_pch.h.gch").exists()}
        return d.name.split("-", 1)[1] not in sets and len(sets) >= self.max_sets

    def _build(self, kind: str, flags: CompileFlags, d: Path, header: Path) -> list[str] | None:
        d.mkdir(parents=True, exist_ok=True)
        header.write_text(f"#include <{HEADERS[kind]}>\n")
        tmp_out = d / f".musaenv_pch.h.gch.{unique_suffix()}"
        start = time.perf_counter()
        cmd = [*flags.cxx, "-x", "c++-header", str(header), "-o", str(tmp_out), *flags.pch_flags()]
        rc, out = run_tool(cmd, d)
        if rc != 0:
            tmp_out.unlink(missing_ok=True)
            if rc != 124 and rc > 0:  # a deterministic failure: do not try again for these flags
                (d / "failed.json").write_text(json.dumps({"cmd": cmd, "log": out[-4000:]}))
            log.warning("precompiled header %s failed (rc %d): %s", d.name, rc, out[-800:])
            return None
        os.replace(tmp_out, d / "musaenv_pch.h.gch")
        log.info("built precompiled header %s in %.1f s", d.name, time.perf_counter() - start)
        return ["-Winvalid-pch", "-include", str(header)]

    def check_used(self, kind: str, flags: CompileFlags, compiler_output: str) -> None:
        """Retire a header the compiler refused (``-Winvalid-pch``): later builds go without it, not slower."""
        if "not used because" not in compiler_output:
            return
        d = self._dir(kind, flags)
        log.warning("precompiled header %s refused by the compiler, retiring it: %s", d.name, compiler_output[-400:])
        with contextlib.suppress(OSError):
            (d / "failed.json").write_text(json.dumps({"log": compiler_output[-4000:]}))
            (d / "musaenv_pch.h.gch").unlink()

    def sweep(self) -> None:
        """Remove half-written headers of builders that died (never a finished one).

        A header is half-written while its builder holds the set's lock; one older than any build may run
        (:data:`PCH_TIMEOUT_S`) belongs to a builder that is gone (pids say nothing: builds run in pid namespaces).
        """
        now = time.time()
        for p in self.root.glob("*/.musaenv_pch.h.gch.*"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > 1.5 * PCH_TIMEOUT_S:
                    p.unlink(missing_ok=True)
