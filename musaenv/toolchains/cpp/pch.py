"""Precompiled headers of ``torch/extension.h`` and ``torch/types.h``, kept in musaenv's cache (torch's compile
flags they are made with: :mod:`musaenv.toolchains.cpp.compiler`).

Measured on the 2-core CI machine with g++ 12 and torch 2.13 (CPU time of one compile of the l1_relu solution
at ``-O3``): parsing ``torch/extension.h`` is ~23 s of a ~36 s compile; the rest is GCC's end-of-unit
instantiation of every template the headers left pending (~5-7 s, not saved in a PCH) and optimising the
pybind11 internals the headers force into every unit (~5 s); linking is ~0.4 s. A precompiled header removes the
parsing only (36 -> 14 s). :mod:`musaenv.toolchains.cpp.fastbuild` removes the rest by compiling the candidate's code
against ``torch/types.h`` (ATen and the torch factory functions, no pybind11: 3 s with its PCH) and binding it in
separately cached objects.

Everything here lives under ``<MUSAENV_CACHE_DIR>/pch``; torch's own ``use_pch`` writes into site-packages and
deletes the file on every ``load_inline(use_pch=False)``, so it is not used.

A precompiled header is only valid for some of the flags it was built with, so there is one per (header, key), the
key being the toolchain and the flags a header depends on (:mod:`musaenv.toolchains.cpp.flagkeys`: ``-O3 -DBLOCK=64``,
``-O2`` and, once its text is checked, ``-O3 -fopenmp`` and ``-O3 -mavx2 -mfma`` share one). GCC itself never
notices that the headers a PCH was made from changed (tested), hence the toolchain in the key. Each is built once
under an ``flock`` (released by the kernel when a builder dies, so a killed build never leaves a lock behind) and
renamed into place atomically, never while a candidate's build waits (:meth:`PchStore.include_flags` builds none,
at most it checks a header's text for a set of extensions, ~1 s; warm-up and background builds call
:meth:`PchStore.build`). ~0.45 GB (types) or ~0.8 GB (extension) each; :data:`MAX_PCH_SETS` bounds how many keys get
one.

Size: the precompiled-header store (keys, builds under flock, the OpenMP and instruction-set checks, retirement) is
one class over one directory with one locking discipline; torch's flag template and the compiler runner it shares
with the other C++ toolchains are in :mod:`musaenv.toolchains.cpp.compiler`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from musaenv.toolchains.cpp.compiler import (
    PCH_TIMEOUT_S,
    CompileFlags,
    file_lock,
    run_tool,
    unique_suffix,
)
from musaenv.toolchains.cpp.compiler import (
    digest as _digest,
)
from musaenv.toolchains.cpp.flagkeys import (
    OMP_FLAG_TOKENS,
    OMP_MACROS,
    isa_families,
    isa_flags,
    isa_pragma,
    macro_name,
    omp_macros,
    omp_shareable,
    refusal,
    refused_macros,
)

__all__ = ["MAX_PCH_SETS", "PchStore", "retire_headers"]

log = logging.getLogger(__name__)

# Flag sets (after flagkeys' keying) with their own header, per kind (~0.45 GB types, ~0.8 GB extension each)
MAX_PCH_SETS = {"split": 8, "full": 3}
# A build starts a missing PCH only with this much of its time limit left: the slowest PCH build seen on the
# loaded 2-core CI machine took 88 s wall (torch/extension.h), and the candidate's own compile must still fit.
PCH_MIN_BUDGET_S = 200.0
HEADERS = {"full": "torch/extension.h", "split": "torch/types.h"}
# Format of a header directory's key (2: keyed on the toolchain too; OpenMP-shared headers; 3: the -O1..-O3 class
# built at -O3). Directories of older formats are removed when a new header is built (:meth:`PchStore._drop_stale`).
PCH_FORMAT = 3

# What GCC's intrinsic headers wrap their code in when an extension is off (the same code either way).
_TARGET_PRAGMA = re.compile(rb"^\s*#\s*pragma\s+GCC\s+(push_options|pop_options|target\s*\(.*\))\s*$")


def _format(d: Path) -> int:
    """The format of a header directory (0: an older release's, from before the format was recorded)."""
    try:
        found = json.loads((d / "key.json").read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        return 0
    return found if isinstance(found, int) else 0


def _current(d: Path) -> bool:
    """A header directory made by this release's store (it counts against :data:`MAX_PCH_SETS`)."""
    try:
        return json.loads((d / "key.json").read_text()).get("format") == PCH_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _macros(flags: CompileFlags, use: Sequence[str], cwd: Path, source: str = "") -> dict[str, str] | None:
    """The macros (name: value) defined at the end of ``source`` preprocessed with ``use``: the compiler's own, and
    those ``source``'s headers define."""
    try:
        p = subprocess.run([*flags.cxx, *use, "-dM", "-E", "-x", "c++", "-"], input=source, cwd=cwd,
                           capture_output=True, text=True, timeout=PCH_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:
        return None
    found = {}
    for line in p.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) >= 2 and parts[0] == "#define":
            found[parts[1]] = parts[2] if len(parts) == 3 else ""
    return found


def _shared(seen: dict[str, dict[str, Any] | None], path: Path) -> bool | None:
    """A sharing decision recorded at ``path`` (read once into ``seen``); ``None`` when there is none yet."""
    if path.name not in seen:
        try:
            found = json.loads(path.read_text())
            seen[path.name] = found if isinstance(found, dict) and isinstance(found.get("shared"), bool) else None
        except (OSError, ValueError):
            seen[path.name] = None
    found = seen[path.name]
    return None if found is None else bool(found["shared"])


class PchStore:
    """Precompiled headers under ``<cache>/pch/<kind>-<flags key>/``.

    A build never waits for a header that is missing: it compiles without one (the split tier's unit then parses
    ``torch/types.h``, ~7 s instead of ~3 s) and names the header in :attr:`wanted`, which the parent builds in
    the background (:mod:`musaenv.toolchains.warmup`); ``musaenv warmup`` builds the common flag sets ahead.

    Args:
        root: The ``pch`` cache directory.
        max_sets: At most this many flag sets per kind get headers (default :data:`MAX_PCH_SETS`).
        deadline: ``time.monotonic()`` by which the current build must end; :meth:`build` starts a missing
            header only when at least :data:`PCH_MIN_BUDGET_S` remain (``None``: no limit).
        isa_by_pragma: Units may take their instruction-set extensions by pragma (:meth:`isa_shared`); ``False``
            for a source the pragma could change (:func:`musaenv.toolchains.cpp.fastbuild.isa_pragma_safe`).
    """

    def __init__(
        self, root: Path, max_sets: dict[str, int] | None = None, deadline: float | None = None,
        isa_by_pragma: bool = True,
    ) -> None:  # fmt: skip
        self.root = root
        self.isa_by_pragma = isa_by_pragma
        self.max_sets = max_sets or MAX_PCH_SETS
        self.deadline = deadline
        self.wanted: list[str] = []
        self.refused: list[str] = []  # headers an empty unit refused: retired by the parent (retire_headers)
        self._macros: tuple[str, ...] | None = None
        self._omp: dict[str, dict[str, Any] | None] = {}
        self._isa: dict[str, dict[str, Any] | None] = {}

    def sensitive_macros(self) -> tuple[str, ...]:
        """Macros GCC refused a header for (they are part of every header key from then on)."""
        if self._macros is None:
            try:
                found = json.loads((self.root / "macros.json").read_text())
                self._macros = tuple(sorted(str(m) for m in found if isinstance(m, str)))
            except (OSError, ValueError, TypeError):
                self._macros = ()
        return self._macros

    def _plain_flags(self, flags: CompileFlags, isa_shared: bool) -> list[str]:
        """The flags of ``flags``' header without ``-fopenmp``/``-pthread`` (what the OpenMP check compares) and,
        when ``isa_shared``, without the instruction-set extensions the unit takes by pragma."""
        return [t for t in flags.pch_flags(self.sensitive_macros(), isa_shared=isa_shared) if t not in OMP_FLAG_TOKENS]

    def _omp_record(self, kind: str, flags: CompileFlags) -> Path:
        plain = self._plain_flags(flags, self.isa_shared(kind, flags) is True)
        return self.root / f"omp-{kind}-{_digest([flags.toolchain, flags.cxx, plain])}.json"

    def _isa_record(self, kind: str, flags: CompileFlags) -> Path:
        name = _digest([flags.toolchain, flags.cxx, self._plain_flags(flags, True), isa_flags(flags.user)])
        return self.root / f"isa-{kind}-{name}.json"

    def isa_shared(self, kind: str, flags: CompileFlags) -> bool | None:
        """Whether ``kind``'s header for the rest of ``flags`` serves them with their instruction-set extensions
        taken by pragma (:func:`musaenv.toolchains.cpp.flagkeys.isa_flags`); ``False`` when they have none, ``None``
        until checked (:meth:`check_isa`, once per installation, header and set of extensions)."""
        if not isa_flags(flags.user) or not self.isa_by_pragma:
            return False
        return _shared(self._isa, self._isa_record(kind, flags))

    def unit_flags(self, kind: str, flags: CompileFlags) -> CompileFlags:
        """The flags a unit using ``kind``'s header for ``flags`` is compiled with: without the extensions it takes
        by pragma, when it does (GCC refuses the header for any difference in them on the command line)."""
        return flags.without(isa_families(flags.user)) if self.isa_shared(kind, flags) else flags

    def _isa_header(self, kind: str, flags: CompileFlags) -> tuple[Path, str] | None:
        record = self._isa.get(self._isa_record(kind, flags).name) or {}
        if not record.get("shared"):
            return None
        lines = [isa_pragma(isa_flags(flags.user))]
        for name, value in sorted(record.get("define", {}).items()):
            lines += [f"#undef {name}", f"#define {name} {value}".rstrip()]
        lines += [f"#undef {name}" for name in sorted(record.get("undef", []))]
        return self._isa_record(kind, flags).with_suffix(".h"), "\n".join(lines) + "\n"

    def check_isa(self, kind: str, flags: CompileFlags) -> bool | None:
        """Decide once per installation, header and set of extensions whether the text of ``kind``'s header for
        the rest of ``flags`` depends on their instruction-set extensions; the decision, or ``None`` when a tool
        would not run (nothing is recorded: the next build checks).

        Shared only for GCC (the compiler whose pragma and header rules this was checked against) when the
        preprocessed header is the same text with and without them, but for the ``#pragma GCC push_options`` /
        ``target`` / ``pop_options`` lines of GCC's intrinsic headers (their code is the same either way: each
        intrinsic carries its own target), and its macros compared likewise. Four preprocessings of the header (~1 s
        of CPU each, side by side; the base flags' two are kept in the store) and no header build, so a candidate's
        build may check inline (:mod:`musaenv.toolchains.cpp.fastbuild`).
        """
        isa = isa_flags(flags.user)
        if not isa:
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        plain = self._plain_flags(flags, True)
        # the macros with the header: one it defines only under them (glibc's FP_FAST_FMA under -mfma) is defined
        # again after it, as the compiler's own are. Up to four preprocessings, side by side (the base flags' two
        # are kept in the store after the first time).
        with ThreadPoolExecutor(4) as pool:
            text_jobs = [pool.submit(self._text, kind, flags, use) for use in (plain, [*plain, *isa])]
            macro_jobs = [pool.submit(self._header_macros, kind, flags, plain, True),
                          pool.submit(self._header_macros, kind, flags, [*plain, *isa], False)]  # fmt: skip
            texts = [job.result() for job in text_jobs]
            macros = [job.result() for job in macro_jobs]
        if None in texts or None in macros:
            return None
        base, with_isa = macros[0] or {}, macros[1] or {}
        gcc = "__GNUC__" in base and "__clang__" not in base
        shared = gcc and texts[0] == texts[1]
        record = {
            "shared": shared,
            "define": {k: v for k, v in with_isa.items() if base.get(k) != v} if shared else {},
            "undef": sorted(set(base) - set(with_isa)) if shared else [],
        }
        path = self._isa_record(kind, flags)
        self._isa[path.name] = record
        made = self._isa_header(kind, flags)
        if made is not None:
            part = made[0].with_name(f".{made[0].name}.{unique_suffix()}")
            part.write_text(made[1])
            os.replace(part, made[0])
        part = path.with_name(f".{path.name}.{unique_suffix()}")
        part.write_text(json.dumps(record))
        os.replace(part, path)
        log.info("%s headers %s %s", kind, "shared across" if shared else "keyed on", " ".join(isa))
        return shared

    def _header_macros(self, kind: str, flags: CompileFlags, use: Sequence[str], keep: bool) -> dict[str, str] | None:
        """:func:`_macros` at the end of ``kind``'s header with ``use``; with ``keep`` (the base flags, the same for
        every set of extensions) read from and written to the store."""
        memo = self.root / f"macros-{kind}-{_digest([flags.toolchain, flags.cxx, list(use)])}.json"
        if keep:
            with contextlib.suppress(OSError, ValueError):
                found = json.loads(memo.read_text())
                if isinstance(found, dict) and all(isinstance(v, str) for v in found.values()):
                    return found
        got = _macros(flags, use, self.root, f"#include <{HEADERS[kind]}>\n")
        if keep and got is not None:
            part = memo.with_name(f".{memo.name}.{unique_suffix()}")
            part.write_text(json.dumps(got))
            os.replace(part, memo)
        return got

    def _text(self, kind: str, flags: CompileFlags, use: Sequence[str]) -> str | None:
        """Digest of ``kind``'s header preprocessed with ``use``, less the target pragmas of intrinsic headers (the
        base flags' digest is kept in the store: it is the same for every set of extensions)."""
        memo = self.root / f"text-{kind}-{_digest([flags.toolchain, flags.cxx, list(use)])}.json"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return str(json.loads(memo.read_text())["sha256"])
        out = self.root / f".text.{unique_suffix()}.i"
        try:
            p = subprocess.run([*flags.cxx, *use, "-E", "-P", "-x", "c++", "-", "-o", str(out)],
                               input=f"#include <{HEADERS[kind]}>\n", cwd=self.root, capture_output=True, text=True,
                               timeout=PCH_TIMEOUT_S)  # fmt: skip
            if p.returncode != 0:
                return None
            digest = hashlib.sha256()
            with out.open("rb") as f:
                for line in f:
                    if not _TARGET_PRAGMA.match(line):
                        digest.update(line)
        except (OSError, subprocess.SubprocessError):
            return None
        finally:
            out.unlink(missing_ok=True)
        part = memo.with_name(f".{memo.name}.{unique_suffix()}")
        part.write_text(json.dumps({"sha256": digest.hexdigest()}))
        os.replace(part, memo)
        return digest.hexdigest()

    def omp_shared(self, kind: str, flags: CompileFlags) -> bool | None:
        """Whether ``kind``'s header for ``flags`` serves units with and without ``-fopenmp``/``-pthread`` alike
        (one header built with :data:`musaenv.toolchains.cpp.flagkeys.OMP_SHARED_FLAGS`); ``None`` until :meth:`build`
        has checked that header's text, once per installation."""
        return _shared(self._omp, self._omp_record(kind, flags))

    def _dir(self, kind: str, flags: CompileFlags) -> Path:
        isa = self.isa_shared(kind, flags) is True
        return self.root / f"{kind}-{flags.key(self.sensitive_macros(), self.omp_shared(kind, flags) is True, isa)}"

    def _ready(self, kind: str, d: Path, flags: CompileFlags) -> list[str] | None:
        if not (d / "musaenv_pch.h.gch").exists() or (d / "failed.json").exists():
            return None
        use = ["-Winvalid-pch", "-include", str(d / "musaenv_pch.h")]
        restore = omp_macros(flags.user) if self.omp_shared(kind, flags) and omp_shareable(flags.user) else ()
        if restore:  # the header was made without them: undefine them for it, define them again right after
            path, text = self._restore_header(kind, d, flags, restore)
            try:
                if path.read_text() != text:
                    return None
            except OSError:
                return None
            use = [*(f"-U{m}" for m in restore), *use, "-include", str(path)]
        made = self._isa_header(kind, flags) if self.isa_shared(kind, flags) else None
        if made is not None:  # the extensions the unit leaves off its command line (unit_flags), by pragma
            try:
                if made[0].read_text() != made[1]:
                    return None
            except OSError:
                return None
            use = [*use, "-include", str(made[0])]
        return use

    def _restore_header(self, kind: str, d: Path, flags: CompileFlags, names: Sequence[str]) -> tuple[Path, str]:
        """The header that defines ``names`` again after an OpenMP-shared header, as the compiler defines them."""
        defines = (self._omp.get(self._omp_record(kind, flags).name) or {}).get("macros", {})
        text = "".join(f"#define {m} {defines.get(m, '1')}\n" for m in names)
        return d / f"musaenv_restore_{'_'.join(n.strip('_').lower() for n in names)}.h", text

    def include_flags(self, kind: str, flags: CompileFlags) -> list[str] | None:
        """``-include`` flags of a ready PCH for ``kind`` (``full`` or ``split``); never builds one. A unit using
        it is compiled with :meth:`unit_flags`.

        A missing header is added to :attr:`wanted` (``None`` is returned: compile without it). Extensions never
        checked against a header that is ready for the rest of the flags are checked here (:meth:`check_isa`,
        ~1 s of CPU, instead of compiling without a header for ~5 s more).
        """
        if self.isa_shared(kind, flags) is None:
            rest = flags.without(isa_families(flags.user))
            if self._ready(kind, self._dir(kind, rest), rest) is not None:
                self.check_isa(kind, flags)
        d = self._dir(kind, flags)
        ready = self._ready(kind, d, flags)
        if ready is None and not (d / "failed.json").exists() and not self._full(d, kind):
            self.wanted.append(kind)
        return ready

    def build(self, kind: str, flags: CompileFlags) -> list[str] | None:
        """Like :meth:`include_flags`, but a missing header is built first (under a lock; warm-up only).

        Returns ``None`` when no header can be had (failed before, too many flag sets, or the build failed).
        """
        if self.isa_shared(kind, flags) is None:
            self.check_isa(kind, flags)
        if self.omp_shared(kind, flags) is None:
            self._check_omp(kind, flags)
        # the digest of this header's text and its macros, which a later set of extensions is compared with (two
        # preprocessings here, in the background, instead of in the first such candidate's build)
        plain = self._plain_flags(flags, True)
        self._text(kind, flags, plain)
        self._header_macros(kind, flags, plain, True)
        d = self._dir(kind, flags)
        ready = self._ready(kind, d, flags)
        if ready is not None:
            return ready
        if (d / "failed.json").exists() or not self._has_budget():
            return None
        with file_lock(self.root / f".{d.name}.lock"):
            ready = self._ready(kind, d, flags)
            if ready is not None:
                return ready
            self._drop_stale(kind)
            if (d / "failed.json").exists() or self._full(d, kind):
                return None
            return self._build(kind, flags, d, d / "musaenv_pch.h")

    def _check_omp(self, kind: str, flags: CompileFlags) -> None:
        """Decide once per installation whether the text of ``kind``'s header for the rest of ``flags`` depends
        on ``-fopenmp``/``-pthread``.

        Shared only when the compiler is GCC (the only one whose header rules this was checked against), the
        preprocessed header is the same text with and without them, it holds no OpenMP pragma (it would parse
        differently), and they define nothing but :data:`OMP_MACROS`. A failed check (a tool that would not run)
        decides nothing: the headers stay keyed on those flags and the next build checks.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        plain = self._plain_flags(flags, self.isa_shared(kind, flags) is True)
        src = f"#include <{HEADERS[kind]}>\n"

        def run(extra: list[str], *what: str) -> str | None:
            try:
                p = subprocess.run([*flags.cxx, *plain, *extra, *what, "-x", "c++", "-"], input=src, cwd=self.root,
                                   capture_output=True, text=True, timeout=PCH_TIMEOUT_S)  # fmt: skip
            except (OSError, subprocess.SubprocessError):
                return None
            return p.stdout if p.returncode == 0 else None

        omp = ["-fopenmp", "-pthread"]
        base_text, omp_text = run([], "-E", "-P"), run(omp, "-E", "-P")
        base_macros, omp_defs = run([], "-dM", "-E"), run(omp, "-dM", "-E")
        if None in (base_text, omp_text, base_macros, omp_defs):
            return
        assert base_text is not None and base_macros is not None and omp_defs is not None
        added = set(omp_defs.splitlines()) - set(base_macros.splitlines())
        macros = {}
        for line in sorted(added):
            _, name, value = [*line.split(" ", 2), ""][:3]
            macros[name] = value
        pragma = re.search(r"^\s*#\s*pragma\s+omp\b", base_text, re.MULTILINE)
        gcc = "#define __GNUC__ " in base_macros and "#define __clang__ " not in base_macros  # rules checked for GCC
        shared = gcc and base_text == omp_text and pragma is None and set(macros) == set(OMP_MACROS) and bool(
            set(base_macros.splitlines()) <= set(omp_defs.splitlines()))  # fmt: skip
        record = {"shared": shared, "macros": macros if shared else {}}
        path = self._omp_record(kind, flags)
        part = path.with_name(f".{path.name}.{unique_suffix()}")
        part.write_text(json.dumps(record))
        os.replace(part, path)
        self._omp[path.name] = record
        log.info("%s headers %s -fopenmp/-pthread", kind, "shared across" if shared else "keyed on")

    def _has_budget(self) -> bool:
        return self.deadline is None or self.deadline - time.monotonic() >= PCH_MIN_BUDGET_S

    def _full(self, d: Path, kind: str) -> bool:
        sets = {p.name for p in self.root.glob(f"{kind}-*") if (p / "musaenv_pch.h.gch").exists() and _current(p)}
        return d.name not in sets and len(sets) >= self.max_sets.get(kind, 0)

    def _drop_stale(self, kind: str) -> None:
        """Remove headers an older release made (an older :data:`PCH_FORMAT`): nothing uses them any more, and
        they must not count against :data:`MAX_PCH_SETS`. Headers of other toolchains sharing the cache stay."""
        for p in self.root.glob(f"{kind}-*"):
            if p.is_dir() and (p / "musaenv_pch.h.gch").exists() and _format(p) < PCH_FORMAT:
                log.info("removing precompiled header %s of an older release", p.name)
                shutil.rmtree(p, ignore_errors=True)

    def _build(self, kind: str, flags: CompileFlags, d: Path, header: Path) -> list[str] | None:
        d.mkdir(parents=True, exist_ok=True)
        header.write_text(f"#include <{HEADERS[kind]}>\n")
        tmp_out = d / f".musaenv_pch.h.gch.{unique_suffix()}"
        start = time.perf_counter()
        shared = self.omp_shared(kind, flags) is True
        key_flags = flags.pch_flags(self.sensitive_macros(), shared, self.isa_shared(kind, flags) is True)
        cmd = [*flags.cxx, "-x", "c++-header", str(header), "-o", str(tmp_out), *key_flags]
        if shared:  # what a unit with -fopenmp or -pthread defines again right after the header (see _ready)
            for names in (OMP_MACROS, ("_REENTRANT",)):
                path, text = self._restore_header(kind, d, flags, names)
                path.write_text(text)
        rc, out = run_tool(cmd, d)
        if rc != 0:
            tmp_out.unlink(missing_ok=True)
            if rc != 124 and rc > 0:  # a deterministic failure: do not try again for these flags
                (d / "failed.json").write_text(json.dumps({"cmd": cmd, "log": out[-4000:]}))
            log.warning("precompiled header %s failed (rc %d): %s", d.name, rc, out[-800:])
            return None
        (d / "flags.json").write_text(json.dumps(cmd))  # what it was made with, for people reading the cache
        (d / "key.json").write_text(json.dumps({"format": PCH_FORMAT, "toolchain": flags.toolchain}))
        os.replace(tmp_out, d / "musaenv_pch.h.gch")
        log.info("built precompiled header %s in %.1f s", d.name, time.perf_counter() - start)
        return self._ready(kind, d, flags)

    def check_used(self, kind: str, flags: CompileFlags, compiler_output: str) -> None:
        """Act on a header the compiler refused (``-Winvalid-pch``); the compile itself went on without it.

        The candidate's output only says a refusal *may* have happened (its source can print any line): an empty
        unit with the same flags, which the candidate cannot write into, decides
        (:func:`musaenv.toolchains.own_checks.refusal_of_empty_unit`). Refused for a macro the candidate defines: that
        macro joins the header keys (the next build with it gets a header of its own). Refused for anything else:
        the header is named in :attr:`refused`, for the parent to retire (:func:`retire_headers`); a candidate's
        build never deletes a shared header.
        """
        if not refusal(compiler_output):
            return
        d = self._dir(kind, flags)
        lines = self._confirmed_refusal(kind, flags, d)
        if not lines:
            log.warning("precompiled header %s: the candidate's output reads like a refusal, an empty unit with its "
                        "flags uses the header: ignored", d.name)  # fmt: skip
            return
        names = refused_macros(lines) & {macro_name(f) for f in flags.user}
        if names:
            self._add_sensitive({n for n in names if n})
            log.info("precompiled header %s depends on macro(s) %s; they now key the headers", kind, sorted(names))
            return
        if self.isa_shared(kind, flags):  # refused for the extensions taken by pragma: they key the headers again
            path = self._isa_record(kind, flags)
            log.warning("precompiled header %s refused with %s by pragma: %s", d.name, isa_flags(flags.user), lines[:3])
            self._isa[path.name] = {"shared": False, "define": {}, "undef": []}
            with contextlib.suppress(OSError):
                part = path.with_name(f".{path.name}.{unique_suffix()}")
                part.write_text(json.dumps(self._isa[path.name]))
                os.replace(part, path)
            return
        log.warning("precompiled header %s refused by the compiler, for the parent to retire: %s", d.name, lines[:3])
        self.refused.append(d.name)

    def _confirmed_refusal(self, kind: str, flags: CompileFlags, d: Path) -> list[str]:
        """GCC's refusal lines for an empty unit with ``flags`` against ``kind``'s ready header (none: it is used)."""
        from musaenv.toolchains.own_checks import refusal_of_empty_unit

        use = self._ready(kind, d, flags)
        if use is None:
            return []
        unit = self.unit_flags(kind, flags)
        return refusal(refusal_of_empty_unit(unit.cxx, unit.cflags, use, d / "musaenv_pch.h"))

    def _add_sensitive(self, names: set[str]) -> None:
        with file_lock(self.root / ".macros.lock"):
            self._macros = None
            merged = sorted(set(self.sensitive_macros()) | names)
            part = self.root / f".macros.{unique_suffix()}.json"
            part.write_text(json.dumps(merged))
            os.replace(part, self.root / "macros.json")
            self._macros = tuple(merged)

    def sweep(self) -> None:
        """Remove half-written headers of builders that died (never a finished one).

        A header is half-written while its builder holds the set's lock; one older than any build may run
        (:data:`~musaenv.toolchains.cpp.compiler.PCH_TIMEOUT_S`) belongs to a builder that is gone (pids say
        nothing: builds run in pid namespaces).
        """
        now = time.time()
        for p in self.root.glob("*/.musaenv_pch.h.gch.*"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > 1.5 * PCH_TIMEOUT_S:
                    p.unlink(missing_ok=True)


_HEADER_DIR = re.compile(r"^(split|full)-[0-9A-Za-z_.-]+$")


def retire_headers(root: Path, names: Sequence[str]) -> list[str]:
    """Retire the headers ``names`` of the store ``root`` that a builder found refused (parent side only: a
    candidate's build names them, :meth:`PchStore.check_used`; it never deletes one). Names that are not a header
    directory of ``root`` are ignored. Returns the names retired."""
    done = []
    for name in dict.fromkeys(names):
        d = root / name
        if not _HEADER_DIR.match(name) or not (d / "musaenv_pch.h.gch").is_file():
            continue
        with contextlib.suppress(OSError):
            (d / "failed.json").write_text(json.dumps({"log": "refused by the compiler for an empty unit"}))
            (d / "musaenv_pch.h.gch").unlink()
            done.append(name)
            log.warning("precompiled header %s retired: the compiler refused it", name)
    return done
