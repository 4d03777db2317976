"""Facts about a build decided by the builder's own probes, never by text the candidate's compile printed.

A candidate writes its compiler's output: ``#error No space left on device`` or a ``#warning`` that reads like GCC's
``-Winvalid-pch`` refusal are a few characters of source. What the parent does on either (an unscored
``infra_error``, a shared precompiled header retired) is decided here instead:

* **Disk full**: :func:`out_of_space` writes a probe file of its own next to the build and reports the ``errno`` of
  a failed write (``ENOSPC``, ``EDQUOT``). A compile log saying so decides nothing.
* **Header refused**: :func:`refusal_of_empty_unit` compiles an empty unit with the same flags against the header
  (its ``.gch`` linked beside an empty header of the same name, so a refused header costs nothing to parse) in a
  fresh directory, with the candidate's flags that name files left out. The refusal lines of *that* compile decide.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["out_of_space", "refusal_of_empty_unit"]

_PROBE_BYTES = 256 * 1024  # more than a filesystem's reserve of metadata blocks, less than any object file
# Options whose value names a file (or makes the compiler write one): an empty unit takes none of the candidate's.
_FILE_OPTS = {"-include", "-imacros", "-include-pch", "-MF", "-MT", "-MQ", "-o", "-x", "-I", "-isystem", "-iquote",
              "-idirafter", "-iprefix", "-iwithprefix", "-isysroot", "--sysroot", "-Xpreprocessor", "-Xassembler",
              "-Xlinker", "-specs", "-wrapper", "-B"}  # fmt: skip
_FILE_PREFIXES = ("@", "-I", "-specs=", "--sysroot=", "-isystem", "-iquote", "-idirafter", "-B", "-fplugin",
                  "-save-temps", "-fdump", "-MD", "-MMD", "-M", "-wrapper", "-fprofile", "-Wl,", "-Wp,", "-Wa,",
                  "-include", "-imacros", "--include", "-fdebug-prefix", "-fmacro-prefix", "-ffile-prefix")  # fmt: skip
_PAIRED = {"-D", "-U", "--param"}  # options whose value comes as the next word, kept with it
_OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(directory: Path) -> str | None:
    """Why a file of :data:`_PROBE_BYTES` cannot be written and synced in ``directory`` when the disk or quota is
    full (the ``OSError``, said plainly); ``None`` when it can, or when it fails for another reason."""
    probe = directory / f".musaenv-space-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            data = memoryview(b"\0" * _PROBE_BYTES)
            while data:  # a nearly full filesystem takes part of a write, and refuses the next one
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        return f"the builder's own {_PROBE_BYTES // 1024} KiB write failed: {e}" if e.errno in _OUT_OF_SPACE else None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def file_free(flags: Sequence[str]) -> list[str]:
    """``flags`` without the options that name a file or make the compiler write one (and their values)."""
    out: list[str] = []
    skip = keep = False
    for tok in flags:
        if skip:
            skip = False
            if keep:
                out.append(tok)
            continue
        keep = tok in _PAIRED
        if tok in _FILE_OPTS or keep:
            if keep:
                out.append(tok)
            skip = True
            continue
        if tok.startswith(_FILE_PREFIXES) or not tok.startswith("-"):
            continue
        out.append(tok)
    return out


def refusal_of_empty_unit(cxx: Sequence[str], cflags: Sequence[str], use: Sequence[str], header: Path) -> str:
    """The compiler's output for an empty unit compiled with ``cflags`` (file-naming options dropped) and ``use``
    (the ``-include`` flags of a ready header, ``header`` among them); ``""`` when it could not run.

    ``header``'s ``.gch`` is linked beside an empty header of the same name in a fresh directory: GCC loads the
    same precompiled header, and when it refuses it falls back to an empty text instead of parsing torch's headers.
    """
    work = Path(tempfile.mkdtemp(prefix=".musaenv-refusal-", dir=header.parent.parent))
    try:
        local = work / header.name
        local.write_text("")
        os.symlink(header.parent / f"{header.name}.gch", work / f"{header.name}.gch")
        args = [str(local) if u == str(header) else u for u in use]
        cmd = [*cxx, *file_free(cflags), *args, "-Winvalid-pch", "-fsyntax-only", "-x", "c++", os.devnull]
        p = subprocess.run(cmd, cwd=work, capture_output=True, text=True, errors="replace", timeout=120)
        return p.stdout + p.stderr
    except (OSError, subprocess.SubprocessError):
        return ""
    finally:
        shutil.rmtree(work, ignore_errors=True)
