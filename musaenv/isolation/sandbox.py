"""Isolation of the worker process that runs candidate code: call :func:`enter_sandbox` before any of it runs.

Measures, in the order applied (docs/sandbox.md explains each, the hazard it answers and what stays open):
private working directory, OOM-killer preference, resource limits, a network namespace (only when seccomp is
missing), Landlock write restriction, dropping capabilities, and a seccomp-BPF filter last (it forbids some of the
calls the earlier steps make). The kernel-facing work is done by the C++ helper ``musaenv._guard`` when it is built,
else by the ctypes code of :mod:`musaenv.isolation.ctypes_guard`, which loads the same BPF program but cannot reach
threads other than the calling one for the per-thread measures (Landlock, capabilities); the report says so.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import logging
import math
import os
import resource
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from musaenv import _env
from musaenv.config import SandboxConfig
from musaenv.errors import ConfigError, EvaluatorError
from musaenv.isolation.ctypes_guard import PyGuard, isolate_network_namespace, landlock_abi, syscall
from musaenv.isolation.gpu_plan import GPU_NODE_PATTERNS
from musaenv.isolation.hidden_paths import hide_paths
from musaenv.isolation.proctree import thread_count
from musaenv.isolation.seccomp import RET_ERRNO, seccomp_program

__all__ = ["SandboxReport", "enter_sandbox", "isolate_network_namespace", "landlock_abi", "seccomp_program"]

log = logging.getLogger(__name__)

# Device nodes a GPU runtime opens read-write after the sandbox is up (CUDA initialises lazily): gpu_plan's list.
_GPU_NODES = GPU_NODE_PATTERNS


@dataclass(frozen=True)
class SandboxReport:
    """What :func:`enter_sandbox` applied, what it did not and why; JSON-safe through :meth:`to_dict`.

    Attributes:
        implementation: ``extension`` (C++ helper ``musaenv._guard``) or ``python`` (ctypes fallback).
        applied: Measures in force, in the order applied (names listed in docs/sandbox.md).
        not_applied: ``(measure, reason)`` for every measure that was skipped or failed.
        landlock_abi: Landlock ABI of the kernel (0: none).
        writable_paths: The only paths the worker may write below when ``landlock_writes`` is applied.
        threads_at_entry: Threads of the worker when the sandbox was entered (torch and OpenBLAS start some).
        threads_uncovered: Threads the per-thread measures (Landlock, capabilities) did not reach.
        timings_ms: ``(measure, milliseconds)`` spent on each step.
    """

    implementation: str
    applied: tuple[str, ...]
    not_applied: tuple[tuple[str, str], ...]
    landlock_abi: int
    writable_paths: tuple[str, ...]
    threads_at_entry: int
    threads_uncovered: int
    timings_ms: tuple[tuple[str, float], ...]

    def enforced(self, measure: str) -> bool:
        """Whether ``measure`` (e.g. ``seccomp_network``, ``landlock_writes``) is in force."""
        return measure in self.applied

    @property
    def network_blocked(self) -> bool:
        """True when seccomp denies network sockets or the worker sits in an empty network namespace."""
        return self.enforced("seccomp_network") or self.enforced("netns")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (pairs become objects)."""
        return {
            "implementation": self.implementation,
            "applied": list(self.applied),
            "not_applied": dict(self.not_applied),
            "landlock_abi": self.landlock_abi,
            "writable_paths": list(self.writable_paths),
            "threads_at_entry": self.threads_at_entry,
            "threads_uncovered": self.threads_uncovered,
            "timings_ms": dict(self.timings_ms),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SandboxReport:
        """Inverse of :meth:`to_dict` (the parent reads the worker's report from the pipe)."""
        return cls(
            implementation=str(d["implementation"]),
            applied=tuple(d["applied"]),
            not_applied=tuple((str(k), str(v)) for k, v in d["not_applied"].items()),
            landlock_abi=int(d["landlock_abi"]),
            writable_paths=tuple(d["writable_paths"]),
            threads_at_entry=int(d["threads_at_entry"]),
            threads_uncovered=int(d["threads_uncovered"]),
            timings_ms=tuple((str(k), float(v)) for k, v in d["timings_ms"].items()),
        )


class _Steps:
    """Runs measures one by one; a measure that fails is recorded, never raised (the worker must still report)."""

    def __init__(self) -> None:
        self.applied: list[str] = []
        self.not_applied: list[tuple[str, str]] = []
        self.timings_ms: list[tuple[str, float]] = []

    def run(self, name: str, fn: Callable[[], str | None]) -> bool:
        """Run ``fn``; it returns None when applied, or the reason it does not apply."""
        t0 = time.perf_counter()
        try:
            reason = fn()
        except (OSError, ValueError, EvaluatorError) as exc:  # EvaluatorError: an architecture without a table
            reason = f"{type(exc).__name__}: {exc}"
        self.timings_ms.append((name, round((time.perf_counter() - t0) * 1e3, 3)))
        self.record(name, reason)
        return reason is None

    def record(self, name: str, reason: str | None) -> None:
        if reason is None:
            self.applied.append(name)
        else:
            self.not_applied.append((name, reason))
            log.info("sandbox: %s not applied: %s", name, reason)


def _load_guard(impl: str, steps: _Steps) -> tuple[Any, str]:
    if impl not in ("auto", "extension", "python"):
        raise ConfigError(f"sandbox implementation: expected auto, extension or python, found {impl!r}.")
    if impl == "python":
        steps.record("extension", "ctypes fallback requested")
        return PyGuard, "python"
    try:
        return importlib.import_module("musaenv._guard"), "extension"
    except ImportError as exc:
        if impl == "extension":
            raise EvaluatorError(
                f"sandbox: expected the C++ helper musaenv._guard, found none ({exc}). "
                "Build it with `python setup.py build_ext --inplace` or reinstall musaenv with a C++ compiler."
            ) from exc
        steps.record("extension", f"musaenv._guard not importable ({exc}); using the ctypes fallback")
        return PyGuard, "python"


def _enter_workdir(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    for var in ("TMPDIR", "TMP", "TEMP", "HOME"):  # torch, triton and CUDA put caches under HOME or TMPDIR
        os.environ[var] = str(workdir)
    os.environ["CUDA_CACHE_PATH"] = str(workdir / ".nv" / "ComputeCache")  # the driver's PTX JIT cache (gpu_plan)
    tempfile.tempdir = None  # tempfile caches its choice; make it look again


def _raise_oom_score() -> None:
    # Under memory pressure the kernel should kill a worker before the trainer; raising needs no privilege.
    Path("/proc/self/oom_score_adj").write_text("1000")


def _tasks_of_uid(uid: int) -> int:
    """Threads of every process of ``uid``: what RLIMIT_NPROC counts (setrlimit(2))."""
    total = 0
    for entry in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{entry}/status").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields and int(fields["Uid"].split()[0]) == uid:
            total += int(fields["Threads"])
    return total


def _apply_rlimits(cfg: SandboxConfig, steps: _Steps) -> None:
    def limit(res: int, soft: int, hard: int | None = None) -> None:
        resource.setrlimit(res, (soft, soft if hard is None else hard))

    steps.run("rlimit_core", lambda: limit(resource.RLIMIT_CORE, 0))
    if cfg.address_space_mb > 0:
        steps.run("rlimit_as", lambda: limit(resource.RLIMIT_AS, cfg.address_space_mb << 20))
    else:
        steps.record("rlimit_as", "address_space_mb=0 (unlimited)")
    if cfg.cpu_time_s > 0:
        # RLIMIT_CPU counts the whole process, so the time spent importing torch is added; SIGXCPU at the soft
        # limit, SIGKILL 5 s later at the hard one (setrlimit(2)).
        ru = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(ru.ru_utime + ru.ru_stime) + cfg.cpu_time_s
        steps.run("rlimit_cpu", lambda: limit(resource.RLIMIT_CPU, soft, soft + 5))
    else:
        steps.record("rlimit_cpu", "cpu_time_s=0 (unlimited)")
    hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n_files = cfg.max_open_files if hard_nofile < 0 else min(cfg.max_open_files, hard_nofile)
    steps.run("rlimit_nofile", lambda: limit(resource.RLIMIT_NOFILE, n_files))
    if cfg.max_processes > 0 and os.getuid() == 0:
        steps.record("rlimit_nproc", "uid 0 is exempt from RLIMIT_NPROC even without capabilities (kernel/fork.c)")
    elif cfg.max_processes > 0:
        # RLIMIT_NPROC is per user, not per process: headroom over what the user already runs.
        steps.run("rlimit_nproc", lambda: limit(resource.RLIMIT_NPROC, _tasks_of_uid(os.getuid()) + cfg.max_processes))
    else:
        steps.record("rlimit_nproc", "max_processes=0 (no limit set)")


def _seccomp_available() -> bool:
    """SECCOMP_GET_ACTION_AVAIL for SECCOMP_RET_ERRNO: true when filters can be loaded (Linux >= 4.14)."""
    try:
        return syscall("seccomp", 2, 0, ctypes.byref(ctypes.c_uint32(RET_ERRNO))) == 0
    except (OSError, EvaluatorError):
        return False


def _writable_paths(workdir: Path, extra: Sequence[str | Path]) -> list[str]:
    nodes = [p for pat in _GPU_NODES for p in sorted(glob.glob(pat)) if stat.S_ISCHR(os.stat(p).st_mode)]
    paths = [str(workdir), "/dev/null", *nodes]
    if nodes:
        # The NVIDIA driver writes below its own process's /proc entry at cuInit. Measured on an H200 under Landlock
        # (2026-12-04): cuInit failed with error 304 until /proc/<pid> (or /proc/<pid>/task) was writable; making
        # /proc/driver or /proc/sys writable did not help. Only the worker's own entry: its capabilities are
        # dropped, so nothing written there reaches beyond this process.
        paths.append(f"/proc/{os.getpid()}")
    for p in map(str, extra):
        if os.path.exists(p):
            paths.append(os.path.realpath(p))
        else:
            log.warning("sandbox: extra writable path %s does not exist; ignored", p)
    return list(dict.fromkeys(paths))


def _hide_key(cache: Path, key: Path) -> str | None:
    """The sealing key's directory becomes unreadable (musaenv.isolation.integrity); created first so a key written
    later is hidden too, and the cache root exists before the layer freezes which of its siblings are readable.

    ``cache`` and ``key`` are resolved before the workdir step moves ``HOME``: resolved after it, with
    ``MUSAENV_CACHE_DIR`` unset (the default), they named ``<workdir>/.cache/musaenv.keys``, so the real key stayed
    readable and the workdir itself, as that path's ancestor, lost its read rights (a builder could not open its
    own temporary files)."""
    for d in (cache, key):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return hide_paths([key])


def _landlock(guard: Any, paths: list[str], block_network: bool, steps: _Steps) -> int:
    """Apply Landlock; returns the threads it did not reach."""
    abi = int(guard.landlock_abi())
    if abi <= 0:
        steps.record("landlock_writes", "Landlock unsupported by this kernel (needs Linux >= 5.13 with lsm=landlock)")
        return 0
    if not steps.run("landlock_writes", lambda: None if guard.restrict_writes(paths, block_network, True) else "abi 0"):
        return 0
    steps.record("landlock_tcp", None if abi >= 4 and block_network else f"ABI {abi} < 4 or network allowed")
    steps.record("landlock_scope", None if abi >= 6 else f"ABI {abi} < 6: signals/abstract sockets not scoped")
    return _uncovered(guard)


def _uncovered(guard: Any) -> int:
    if guard is PyGuard:
        return thread_count() - 1
    signalled, confirmed = guard.last_thread_sync()
    return int(signalled) - int(confirmed)


def _seccomp(guard: Any, cfg: SandboxConfig, processes: bool, exe: bool, steps: _Steps) -> None:
    groups = {"seccomp_network": cfg.block_network, "seccomp_processes": processes, "seccomp_exec": exe}
    groups["seccomp_admin"] = groups["seccomp_signals"] = True
    # Without Landlock's signal scope, a worker that cannot start processes may signal only itself (its fork
    # server, parent and neighbours are out of reach); with process creation allowed its children need signals.
    own_pid = os.getpid() if processes and "landlock_scope" not in steps.applied else 0
    program = seccomp_program(cfg.block_network, processes, exe, True, own_pid=own_pid)
    # One program, assembled in Python; either guard only loads it (an extension built before it took the program
    # lacks the call: the ctypes loader does the same).
    install = getattr(guard, "install_seccomp_program", PyGuard.install_seccomp_program)
    if not steps.run("seccomp", lambda: install(program)):
        return
    steps.applied.remove("seccomp")  # reported per group below
    for name, on in groups.items():
        steps.record(name, None if on else "disabled by the caller")


# Over 60 lines with its docstring (the code is ~35): the measures in the one order they must be applied.
# size: the layers in the order they must be applied, each a short call or record; split, the order would hide.
def enter_sandbox(
    cfg: SandboxConfig,
    workdir: Path,
    *,
    block_processes: bool = True,
    block_exec: bool = True,
    restrict_writes: bool = True,
    extra_writable: Sequence[str | Path] = (),
    implementation: str | None = None,
) -> SandboxReport:
    """Confine the calling process (the worker) before it runs candidate code. Irreversible.

    Call it after importing torch and opening the result pipe, before importing any candidate module. No measure
    raises: what failed is listed in the report, and the caller decides whether to run the candidate anyway.

    Args:
        cfg: Limits and the network switch.
        workdir: Private directory: becomes the cwd, ``HOME`` and ``TMPDIR``, and the only writable place.
        block_processes: Deny fork/vfork/clone of processes (threads still work). Triton's JIT runs ``ptxas`` in a
            subprocess, so its workers need False or kernels compiled by the parent.
        block_exec: Deny execve/execveat.
        restrict_writes: Landlock: no file writes outside ``workdir``, ``/dev/null``, GPU device nodes and
            ``extra_writable``.
        extra_writable: More writable paths (they must exist), e.g. a build directory torch must lock.
        implementation: ``auto``, ``extension`` or ``python``; ``None`` reads ``MUSAENV_SANDBOX_IMPL``.

    Returns:
        A :class:`SandboxReport`.

    Raises:
        ConfigError: Unknown implementation name.
        EvaluatorError: ``implementation="extension"`` but ``musaenv._guard`` is not built.
    """
    t0 = time.perf_counter()
    steps = _Steps()
    guard, used = _load_guard(implementation or _env.sandbox_implementation(), steps)
    workdir = Path(workdir).resolve()
    threads = thread_count()
    cache, key = _env.cache_dir().absolute(), _env.key_dir().absolute()  # before HOME moves (see _hide_key)
    steps.run("workdir", lambda: _enter_workdir(workdir))
    steps.run("oom_score_adj", _raise_oom_score)
    _apply_rlimits(cfg, steps)
    has_seccomp = _seccomp_available()
    if cfg.block_network and not has_seccomp:
        steps.run("netns", isolate_network_namespace)  # before capabilities go: it needs CAP_SYS_ADMIN
    paths = _writable_paths(workdir, extra_writable)
    steps.run("landlock_hide_key", lambda: _hide_key(cache, key))
    uncovered = _landlock(guard, paths, cfg.block_network, steps) if restrict_writes else 0
    if not restrict_writes:
        steps.record("landlock_writes", "disabled by the caller")
    if steps.run("capabilities", guard.drop_capabilities):
        uncovered = max(uncovered, _uncovered(guard))
    if has_seccomp:
        _seccomp(guard, cfg, block_processes, block_exec, steps)
    else:
        steps.record("seccomp", "seccomp filters unavailable (kernel without CONFIG_SECCOMP_FILTER)")
    steps.timings_ms.append(("total", round((time.perf_counter() - t0) * 1e3, 3)))
    report = SandboxReport(
        implementation=used,
        applied=tuple(steps.applied),
        not_applied=tuple(steps.not_applied),
        landlock_abi=int(guard.landlock_abi()),
        writable_paths=tuple(paths) if "landlock_writes" in steps.applied else (),
        threads_at_entry=threads,
        threads_uncovered=uncovered,
        timings_ms=tuple(steps.timings_ms),
    )
    log.info("sandbox entered: %s", report.to_dict())
    return report
