"""A Landlock layer that makes a few directories unreadable to a sandboxed process (the sealing key's).

Landlock grants rights beneath the paths it is given and denies everything else it handles, so "everything but
``D``" is spelled as: read-dir on each ancestor of ``D`` (listing names only) and full read rights on every
*sibling* along the way. Entries created later directly inside an ancestor of ``D`` are unreadable too; callers
create what the process will need (its workdir, the cache root) before the layer goes on.

Applied with raw syscalls on the calling thread. Threads that already exist keep reading (Landlock is per thread;
the C++ helper's all-thread signal trick covers the write layer only); the sandbox report counts them as
``threads_uncovered`` already.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["hide_paths"]

_NR_CREATE, _NR_ADD_RULE, _NR_RESTRICT = 444, 445, 446  # the same numbers on x86_64 and aarch64
_READ_FILE, _READ_DIR, _REFER = 1 << 2, 1 << 3, 1 << 13
_PR_SET_NO_NEW_PRIVS = 38


class _Attr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64)]


class _Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _call(libc: ctypes.CDLL, nr: int, *args: object) -> int:
    rc = int(libc.syscall(ctypes.c_long(nr), *args))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock syscall {nr}: {os.strerror(err)}")
    return rc


def _rules(hidden: Sequence[Path], refer: int) -> list[tuple[str, int]]:
    """(path, rights) allowing every read except below ``hidden``.

    ``refer`` (``LANDLOCK_ACCESS_FS_REFER`` from ABI 2, else 0) goes on every directory rule: a ruleset that does
    not grant it denies every rename or link across directories (EXDEV), e.g. Triton moving a compiled kernel
    from the workdir into its cache.
    """
    hidden_set = {p.resolve() for p in hidden}
    chain: set[Path] = set()
    for h in hidden_set:
        chain.update(h.parents)
    rules: list[tuple[str, int]] = [(str(a), _READ_DIR | refer) for a in sorted(chain)]
    for ancestor in sorted(chain):
        try:
            children = list(ancestor.iterdir())
        except OSError:
            continue
        for child in children:
            real = child.resolve() if child.is_symlink() else child
            if child in chain or child in hidden_set or real in hidden_set or real in chain:
                continue
            rights = _READ_FILE | _READ_DIR | refer if child.is_dir() else _READ_FILE
            rules.append((str(child), rights))
    return rules


def hide_paths(hidden: Sequence[Path]) -> str | None:
    """Deny this thread (and what it starts later) reading below ``hidden``; ``None`` when applied, else why not."""
    present = [p for p in hidden if p.exists()]
    if not present:
        return "nothing to hide (the paths do not exist)"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    try:
        abi = _call(libc, _NR_CREATE, None, ctypes.c_long(0), ctypes.c_long(1))
    except OSError as e:
        return f"Landlock unavailable: {e}"
    if abi < 1:
        return "Landlock unavailable"
    refer = _REFER if abi >= 2 else 0
    attr = _Attr(_READ_FILE | _READ_DIR | refer)
    rfd = _call(libc, _NR_CREATE, ctypes.byref(attr), ctypes.c_long(8), ctypes.c_long(0))
    try:
        for path, rights in _rules(present, refer):
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # vanished meanwhile: it stays unreadable, which is the safe side
            try:
                _call(libc, _NR_ADD_RULE, ctypes.c_long(rfd), ctypes.c_long(1),
                      ctypes.byref(_Beneath(rights, pfd)), ctypes.c_long(0))  # fmt: skip
            finally:
                os.close(pfd)
        if int(libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0)) != 0:
            return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
        _call(libc, _NR_RESTRICT, ctypes.c_long(rfd), ctypes.c_long(0))
    finally:
        os.close(rfd)
    return None
