"""Confinement of a build: the builder and everything it starts (ninja, g++, cc1plus, as, ld, nvcc, mcc).

A candidate chooses the sources and flags of its build, so the build runs with the same distrust as the worker
(docs/sandbox.md, "The build sandbox"). :func:`run_confined` is called by the builder process
(``python -m musaenv.toolchains.builder``) before it reads anything of the candidate:

1. **Tied to its parent.** ``PR_SET_PDEATHSIG`` on the builder, then a check that the parent is still the one that
   started it (the race the man page warns about): a killed evaluator takes its builds along (SIGKILL with a pid
   namespace; without one SIGTERM, on which the subreaper kills every descendant, compilers included, first).
2. **A process namespace of its own** (``unshare(CLONE_NEWPID)``, needs CAP_SYS_ADMIN, as in a root container): the
   build runs as pid 1 of a new namespace, and when it ends, succeeded or not, the kernel kills every process left
   in it, daemons that double-forked and called ``setsid`` included; it gets a ``/proc`` of that namespace (else
   pids in ``/proc`` name the host's processes). Without the privilege the builder becomes a
   *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so orphans are re-parented to it instead of init, and it kills
   every descendant when the build ends. The report says which one was used.
3. **The worker's sandbox** (:func:`musaenv.isolation.sandbox.enter_sandbox`) on the build process, with process
   creation and exec allowed (compilers need both): rlimits (address space, CPU seconds per process, open files,
   no core files) plus ``RLIMIT_FSIZE``, Landlock writes only below the private build directory, the
   precompiled-header store and ``/dev/null``, seccomp denying network sockets and the admin calls (ptrace,
   mount, setrlimit, chmod, ...), capabilities dropped, ``no_new_privs``. Every process the build starts inherits
   all of it.

What the build produced is read back by the parent, which alone installs it into the shared cache.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import resource
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["BUILD_FILE_SIZE_MB", "run_confined"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
# The largest file a build writes is a precompiled torch/extension.h: ~0.8 GB measured here (docs/scaling.md).
BUILD_FILE_SIZE_MB = 4096
# Address space per compiler process: cc1plus on torch/extension.h peaks at ~0.7 GB RSS (ps, this machine) and
# maps the ~0.8 GB header; 8 GB leaves room for large template instantiations while stopping runaway ones.
BUILD_ADDRESS_SPACE_MB = 8192


def _prctl(option: int, arg: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0))


def _tie_to_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    _prctl(_PR_SET_PDEATHSIG, sig)
    if parent_pid and os.getppid() != parent_pid:  # the parent died before the flag was set
        os._exit(70)


def _new_pid_namespace() -> str | None:
    """None when the next child is pid 1 of a new namespace, else why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWPID) == 0:
        return None
    return f"unshare(CLONE_NEWPID): {os.strerror(ctypes.get_errno())}"


def _mount_own_proc() -> str | None:
    """Give the build (pid 1 of its namespace) a ``/proc`` of that namespace: None, or why not.

    Without it ``/proc`` lists the host's processes under the build's pid numbers: the build's first child, pid 2,
    read as the host's pid 2 (kthreadd, whose tree is every kernel thread), so a compile step's CPU seconds
    (:func:`musaenv.isolation.limits.tree_cpu_seconds`) were the machine's and a syntax error became a timeout.
    The mount lives in a private mount namespace of the build's; the parent's ``/proc`` is untouched.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"making / private: {os.strerror(ctypes.get_errno())}"
    if libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) != 0:
        return f"mount proc: {os.strerror(ctypes.get_errno())}"
    return None


def _kill_descendants() -> int:
    from musaenv.isolation.proctree import descendants, kill_tree

    left = descendants(os.getpid())
    for pid in left:
        with contextlib.suppress(OSError):
            kill_tree(pid, timeout_s=1.0)
    return len(left)


def _die_with_tree(signum: int, frame: object) -> None:
    """The evaluator died (or asked us to stop): no compiler outlives the build (without a pid namespace, PDEATHSIG
    of the build's grandchildren is not set, so they would be re-parented to init and compile on)."""
    _kill_descendants()
    os._exit(128 + signum)


def _confine_child(tmp: Path, writable: Sequence[Path], cpu_s: int) -> dict[str, Any]:
    from musaenv.config import SandboxConfig
    from musaenv.isolation.sandbox import enter_sandbox

    resource.setrlimit(resource.RLIMIT_FSIZE, (BUILD_FILE_SIZE_MB << 20, BUILD_FILE_SIZE_MB << 20))
    cfg = SandboxConfig(address_space_mb=BUILD_ADDRESS_SPACE_MB, cpu_time_s=cpu_s, max_open_files=1024)
    report = enter_sandbox(
        cfg, tmp, block_processes=False, block_exec=False, extra_writable=[str(p) for p in writable if p.exists()]
    )
    return report.to_dict()


def run_confined(
    build: Callable[[dict[str, Any]], int],
    tmp: Path,
    *,
    parent_pid: int,
    writable: Sequence[Path],
    cpu_s: int,
) -> int:
    """Run ``build(report)`` confined (see the module docstring); returns its exit code.

    Args:
        build: The build itself; receives the confinement report (JSON-safe) and returns an exit code.
        tmp: The private build directory (becomes cwd, ``HOME`` and ``TMPDIR``; writable).
        parent_pid: The evaluator that started the builder (0: do not check).
        writable: Further directories the build may write (the precompiled-header store).
        cpu_s: CPU seconds each build process may use (``RLIMIT_CPU``).
    """
    why_not = _new_pid_namespace()
    if why_not is None:  # SIGKILL: the namespace's pid 1 dies with us (its own PDEATHSIG), the kernel kills the rest
        _tie_to_parent(parent_pid)
    else:  # a subreaper must outlive its tree: SIGTERM, on which it kills every descendant before it exits
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        signal.signal(signal.SIGTERM, _die_with_tree)
        _tie_to_parent(parent_pid, signal.SIGTERM)
    report: dict[str, Any] = {"pid_namespace": why_not is None, "pid_namespace_reason": why_not or ""}
    pid = os.fork()
    if pid == 0:  # the build: pid 1 of the new namespace, or a plain child under a subreaper
        code = 70
        try:
            _tie_to_parent(0)
            if why_not is None:  # before the sandbox, which denies mount
                report["own_proc_reason"] = _mount_own_proc() or ""
            report["sandbox"] = _confine_child(tmp, writable, cpu_s)
            code = build(report)
        except BaseException:  # the harness must leave a readable result; the parent reads result.json
            log.exception("confined build failed")
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    t0 = time.monotonic()
    left = _kill_descendants()
    if left:
        log.warning("build left %d processes behind; killed in %.2f s", left, time.monotonic() - t0)
    return os.waitstatus_to_exitcode(status)
