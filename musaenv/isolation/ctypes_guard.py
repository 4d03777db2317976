"""The ctypes implementation of the sandbox's kernel calls, used when the C++ helper ``musaenv._guard`` is not built.

Raw system calls through libc's ``syscall()`` (seccomp, Landlock, capabilities, namespaces). :class:`PyGuard` has
the extension's interface; unlike it, the per-thread measures (Landlock, capabilities) reach the calling thread
only, which :func:`musaenv.isolation.sandbox.enter_sandbox` reports. Also used on its own by the build service to
stack a Landlock layer on a compiler process (:mod:`musaenv.toolchains.cpp.fastbuild`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from collections.abc import Sequence
from typing import Any

from musaenv.isolation.seccomp import CLONE_NEWNET, CLONE_NEWUSER, syscall_numbers

__all__ = ["PyGuard", "check", "isolate_network_namespace", "landlock_abi", "libc", "prctl", "syscall"]

# Landlock (linux/landlock.h): write-type filesystem rights per ABI, TCP rights (ABI 4), scopes (ABI 6).
_LL_WRITE = 0b1_1111_1111_0010  # WRITE_FILE, REMOVE_DIR/FILE, MAKE_CHAR/DIR/REG/SOCK/FIFO/BLOCK/SYM
_LL_REFER, _LL_TRUNCATE, _LL_FILE_RIGHTS = 1 << 13, 1 << 14, (1 << 1) | (1 << 14)
_NR_LL_CREATE, _NR_LL_ADD_RULE, _NR_LL_RESTRICT = 444, 445, 446


_LIBC: list[ctypes.CDLL] = []  # loaded on first use, not at import


def libc() -> ctypes.CDLL:
    if not _LIBC:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        _LIBC.append(lib)
    return _LIBC[0]


def check(rc: int, what: object) -> int:
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def syscall(name_or_nr: str | int, *args: Any) -> int:
    """Raw syscall through libc's ``syscall()``; raises OSError like the C++ helper does."""
    nr = name_or_nr if isinstance(name_or_nr, int) else syscall_numbers(platform.machine())[name_or_nr]
    cargs = (ctypes.c_long(a) if isinstance(a, int) else a for a in args)
    return check(int(libc().syscall(ctypes.c_long(nr), *cargs)), f"syscall {name_or_nr}")


def prctl(option: int, arg2: int = 0) -> None:
    check(int(libc().prctl(option, ctypes.c_ulong(arg2), 0, 0, 0)), f"prctl({option})")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class PyGuard:
    """ctypes twin of ``musaenv._guard``; per-thread measures reach the calling thread only."""

    @staticmethod
    def landlock_abi() -> int:
        try:
            return syscall(_NR_LL_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
        except OSError:
            return 0

    @staticmethod
    def install_seccomp_program(prog: bytes) -> None:
        buf = ctypes.create_string_buffer(prog, len(prog))
        fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
        prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
        if syscall("seccomp", 1, 1, ctypes.byref(fprog)) > 0:  # SET_MODE_FILTER, FLAG_TSYNC; > 0: tid that failed
            raise OSError(11, "seccomp TSYNC failed on another thread")

    @staticmethod
    def restrict_writes(paths: Sequence[str], deny_tcp: bool = False, scope: bool = False) -> int:
        abi = PyGuard.landlock_abi()
        if abi <= 0:
            return 0
        fs = _LL_WRITE | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
        attr = _RulesetAttr(fs, 0b11 if deny_tcp and abi >= 4 else 0, 0b11 if scope and abi >= 6 else 0)
        rfd = syscall(_NR_LL_CREATE, ctypes.byref(attr), 24 if abi >= 6 else 16 if abi >= 4 else 8, 0)
        try:
            for path in paths:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                try:
                    rights = fs if os.path.isdir(path) else fs & _LL_FILE_RIGHTS
                    syscall(_NR_LL_ADD_RULE, rfd, 1, ctypes.byref(_PathBeneath(rights, pfd)), 0)
                finally:
                    os.close(pfd)
            prctl(38, 1)
            syscall(_NR_LL_RESTRICT, rfd, 0)
        finally:
            os.close(rfd)
        return abi

    @staticmethod
    def drop_capabilities() -> None:
        for cap in range(64):
            with contextlib.suppress(OSError):  # EINVAL past the last cap, EPERM when unprivileged
                prctl(24, cap)  # PR_CAPBSET_DROP
        with contextlib.suppress(OSError):  # EINVAL before Linux 4.3
            prctl(47, 4)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
        syscall("capset", ctypes.byref(header), ctypes.byref((ctypes.c_uint32 * 6)()))

    @staticmethod
    def last_thread_sync() -> tuple[int, int]:
        return (0, 0)


def landlock_abi() -> int:
    """Landlock ABI version of the running kernel (0 when unsupported); costs one syscall."""
    return PyGuard.landlock_abi()


def isolate_network_namespace() -> None:
    """Move the calling thread into a new, empty network namespace (only a loopback that is down).

    ``unshare(CLONE_NEWNET)`` needs CAP_SYS_ADMIN; without it, a new user namespace is tried as well, which the
    kernel allows only in a single-threaded process. Threads that already exist keep the old namespace.

    Raises:
        OSError: Neither worked (EPERM without privileges, EINVAL in a multi-threaded process).
    """
    unshare = libc().unshare
    if unshare(CLONE_NEWNET) == 0:
        return
    check(int(unshare(CLONE_NEWUSER | CLONE_NEWNET)), "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
