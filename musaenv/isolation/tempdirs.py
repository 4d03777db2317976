"""Private temporary directories of workers and fork servers, and the sweep that removes orphaned ones.

Each worker and fork server gets a directory ``$TMPDIR/musaenv-<role>-*`` (its working directory and log). The
process that made it removes it when it closes the worker; a process that is SIGKILLed (a killed trainer, CLI,
Ray actor or test) cannot, and before this sweep such directories piled up by the dozen per CI run.

So every directory records its **owner** (the process that made it and would remove it) in an ``owner`` file:
pid and start time, which tell a dead owner apart from a later process that reuses its pid. :func:`sweep` (run
once per process, when the first directory is made) removes the directories whose owner is gone, and never one
that a live process still uses (its working directory or an open file inside it). Directories of older versions
have no ``owner`` file; they are removed only when no live process uses them and they are older than
:data:`LEGACY_AGE_S`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil

from musaenv.isolation.proctree import start_time

__all__ = ["LEGACY_AGE_S", "OWNER_FILE", "PREFIXES", "make", "owner_alive", "sweep"]

log = logging.getLogger(__name__)

#: Directory name prefixes this module makes and sweeps.
PREFIXES = ("musaenv-candidate-", "musaenv-reference-", "musaenv-forkserver-")
OWNER_FILE = "owner"
#: A directory without an owner file (made by an older version) must be at least this old to be swept.
LEGACY_AGE_S = 600.0

_swept = False
_sweep_lock = threading.Lock()


def _identity() -> str:
    pid = os.getpid()
    return f"{pid} {start_time(pid)!r}\n"


def make(role: str) -> Path:
    """A new private directory ``musaenv-<role>-*`` owned by this process (sweeping orphans first, once)."""
    global _swept
    with _sweep_lock:
        if not _swept:
            _swept = True
            with contextlib.suppress(Exception):  # a failed sweep must never stop an evaluation
                sweep()
    path = Path(tempfile.mkdtemp(prefix=f"musaenv-{role}-"))
    (path / OWNER_FILE).write_text(_identity())
    return path


def owner_alive(path: Path) -> bool | None:
    """Whether the process that made ``path`` still runs; ``None`` when the directory names no owner."""
    try:
        pid_s, birth_s = (path / OWNER_FILE).read_text().split()
        pid, birth = int(pid_s), float(birth_s)
    except (OSError, ValueError):
        return None
    now = start_time(pid)
    return now is not None and abs(now - birth) < 0.01


def _in_use() -> set[str]:
    """Directories under the temp dir that a live process has as working directory or holds a file open in."""
    root = os.path.realpath(tempfile.gettempdir()) + os.sep
    used: set[str] = set()

    def note(p: str) -> None:
        if p.startswith(root):
            used.add(p[len(root) :].split(os.sep, 1)[0])

    for pid in psutil.pids():  # readlink of /proc/<pid>/{cwd,fd/*}: cheaper than psutil's open_files()
        base = f"/proc/{pid}"
        with contextlib.suppress(OSError):
            note(os.readlink(f"{base}/cwd"))
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"{base}/fd"):
                with contextlib.suppress(OSError):
                    note(os.readlink(f"{base}/fd/{fd}"))
    return used


def sweep(now: float | None = None) -> list[Path]:
    """Remove this module's directories whose owner is dead (see the module docstring); returns what it removed."""
    root = Path(tempfile.gettempdir())
    now = time.time() if now is None else now
    candidates = [p for p in root.iterdir() if p.name.startswith(PREFIXES) and p.is_dir() and not p.is_symlink()]
    orphans = []
    for path in candidates:
        alive = owner_alive(path)
        if alive:
            continue
        if alive is None:  # an older version's, or one made a moment ago whose owner file is not written yet
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime < LEGACY_AGE_S:
                    continue
        orphans.append(path)
    if not orphans:
        return []
    used = _in_use()  # an orphaned worker may still be running: leave its directory until it has ended
    removed = [p for p in orphans if p.name not in used]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    if removed:
        log.info("removed %d temporary directories of dead musaenv processes", len(removed))
    return removed
