"""The sandbox's seccomp-BPF program, assembled here and nowhere else.

Pure Python (struct packing): no system call is made here. :mod:`musaenv.isolation.sandbox` loads the program,
through the C++ helper (``musaenv._guard.install_seccomp_program``, which only checks its length and loads it) or
through ctypes; both load these bytes, so the two sandbox implementations cannot drift apart.
"""

from __future__ import annotations

import platform
import struct
from typing import Any

from musaenv.errors import EvaluatorError

__all__ = ["STOP_SIGNALS", "seccomp_program", "syscall_numbers"]

STOP_SIGNALS = (19, 20, 21, 22)

# name, x86_64 number, aarch64 number ("-": no such syscall there). From the kernel's syscall_64.tbl and
# include/uapi/asm-generic/unistd.h; numbers >= 403 are shared by every architecture.
_SYSCALL_TABLE = """
socket 41 198  io_uring_setup 425 425  fork 57 -  vfork 58 -  clone 56 220  clone3 435 435  execve 59 221
execveat 322 281  ptrace 101 117  process_vm_readv 310 270  process_vm_writev 311 271  init_module 175 105
finit_module 313 273  delete_module 176 106  kexec_load 246 104  kexec_file_load 320 294  reboot 169 142
swapon 167 224  swapoff 168 225  mount 165 40  umount2 166 39  pivot_root 155 41  move_mount 429 429  fsopen 430 430
fsmount 432 432  fspick 433 433  mount_setattr 442 442  bpf 321 280  setrlimit 160 164  prlimit64 302 261
chmod 90 -  fchmod 91 52  fchmodat 268 53  fchmodat2 452 452  chown 92 -  fchown 93 55  lchown 94 -
fchownat 260 54  setxattr 188 5  lsetxattr 189 6  fsetxattr 190 7  setxattrat 463 463  removexattr 197 14
lremovexattr 198 15  fremovexattr 199 16  removexattrat 466 466  unshare 272 97  setns 308 268  add_key 248 217
request_key 249 218  keyctl 250 219  seccomp 317 277  capset 126 91  sched_setaffinity 203 122
kill 62 129  tkill 200 130  tgkill 234 131  rt_sigqueueinfo 129 138  rt_tgsigqueueinfo 297 240
pidfd_send_signal 424 424  fcntl 72 25  ioctl 16 29  timer_create 222 107  mq_notify 244 184  prctl 157 167
""".split()  # noqa: SIM905 - a table reads better than 165 literals
_ARCHES = {"x86_64": (1, 0xC000003E), "aarch64": (2, 0xC00000B7)}  # table column, AUDIT_ARCH_* (linux/audit.h)
_ADMIN = (  # noqa: SIM905
    "ptrace process_vm_readv process_vm_writev init_module finit_module delete_module kexec_load kexec_file_load "
    "reboot swapon swapoff mount umount2 pivot_root move_mount fsopen fsmount fspick mount_setattr bpf setrlimit "
    "prlimit64 chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat setxattr lsetxattr fsetxattr setxattrat "
    "removexattr lremovexattr fremovexattr removexattrat unshare setns add_key request_key keyctl "
    "sched_setaffinity"  # the parent pins the worker's threads for the timed calls (cpu_watch)
).split()
_GROUPS = {
    "network": ["socket", "io_uring_setup"],
    "processes": ["fork", "vfork", "clone", "clone3"],
    "exec": ["execve", "execveat"],
    "admin": _ADMIN,
}
# Stop signals (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU: 19-22 on x86_64 and aarch64). A worker stopped by its own
# hand would look like one stopped by the host (its CPU and own time stand still, only the wall-clock backstop
# ends it, as infra_error): every way a process can send itself one is refused, so a stop is never the
# candidate's (docs/sandbox.md, "Reliability"). Argument index of the signal number in each call:
_STOP_LO, _STOP_HI = 19, 23
_SIG_ARG = {"kill": 1, "tkill": 1, "tgkill": 2, "rt_sigqueueinfo": 1, "rt_tgsigqueueinfo": 2, "pidfd_send_signal": 1}
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _TIOCSTI, _TIOCSIG = 8, 10, 15, 0x5412, 0x40045436  # asm-generic values
_PR_SET_PDEATHSIG = 1
_SPECIAL = {"socket": "socket", "clone": "clone", "clone3": "enosys", "prlimit64": "prlimit"}
_RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000  # linux/seccomp.h
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
_EPERM, _ENOSYS, _AF_UNIX, _CLONE_THREAD, CLONE_NEWNET, CLONE_NEWUSER = 1, 38, 1, 0x10000, 0x40000000, 0x10000000


def syscall_numbers(arch: str) -> dict[str, int]:
    if arch not in _ARCHES:
        raise EvaluatorError(f"sandbox: expected x86_64 or aarch64, found {arch!r}. Run workers on one of those.")
    col = _ARCHES[arch][0]
    rows = [_SYSCALL_TABLE[i : i + 3] for i in range(0, len(_SYSCALL_TABLE), 3)]
    return {r[0]: int(r[col]) for r in rows if r[col] != "-"}


def _to(jump: int | str, at: int, deny_at: int) -> int:
    """A jump's offset: ``D`` is the block's EPERM return, placed at ``deny_at``; numbers are already relative."""
    return deny_at - at - 1 if jump == "D" else int(jump)


def _signal_rules(nr: dict[str, int], own_pid: int, eperm: int, worker: bool) -> list[tuple[int, int, int, int]]:
    """Refuse every self-sent stop signal; with ``own_pid`` (Landlock's signal scope missing) also every signal to a
    process but the caller and its threads; in a ``worker`` (no process creation) a new parent-death signal (a
    worker that swapped its SIGKILL for SIGSTOP or none would outlive its fork server). One block per call: checks
    jump to ``D`` (EPERM) or fall through."""
    lo, hi = (lambda i: 16 + 8 * i), (lambda i: 20 + 8 * i)  # args[i]'s words in seccomp_data (little endian)
    stop = lambda i: [(_LD, 0, 0, lo(i)), (_JGE, 0, 1, _STOP_LO), (_JGE, 0, "D", _STOP_HI)]  # noqa: E731
    not_me = lambda i: [(_LD, 0, 0, lo(i)), (_JEQ, 0, "D", own_pid)] if own_pid else []  # noqa: E731
    deny = [(_RET, 0, 0, eperm)]
    nonnull = lambda i: [(_LD, 0, 0, lo(i)), (_JEQ, 0, "D", 0), (_LD, 0, 0, hi(i)), (_JEQ, 0, "D", 0)]  # noqa: E731
    checks: dict[str, list[Any]] = {name: stop(arg) for name, arg in _SIG_ARG.items()}
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        checks[name] += not_me(0)
    for name in ("tkill", "pidfd_send_signal"):  # a bare tid or a pidfd names any process: no target is known safe
        checks[name] += deny if own_pid else []
    checks["fcntl"] = [(_LD, 0, 0, lo(1)), (_JEQ, 0, 3, _F_SETSIG), *stop(2)]  # F_SETSIG: a stop replaces SIGIO
    if own_pid:  # SIGIO to another owner
        checks["fcntl"] += [(_LD, 0, 0, lo(1)), (_JEQ, "D", 0, _F_SETOWN_EX), (_JEQ, 0, 2, _F_SETOWN)]
        checks["fcntl"] += not_me(2)
    checks["ioctl"] = [(_LD, 0, 0, lo(1)), (_JEQ, "D", 0, _TIOCSIG), (_JEQ, "D", 0, _TIOCSTI)]  # ^Z to its own tty
    checks["timer_create"] = nonnull(1)  # a sigevent may name SIGSTOP; NULL means SIGALRM
    checks["mq_notify"] = nonnull(1)
    if worker:
        checks["prctl"] = [(_LD, 0, 0, lo(0)), (_JEQ, "D", 0, _PR_SET_PDEATHSIG)]
    out: list[tuple[int, int, int, int]] = []
    for name, body in checks.items():
        if name not in nr:
            continue
        body = [*body, (_RET, 0, 0, _RET_ALLOW)]
        out.append((_JEQ, 0, len(body) + 1, nr[name]))
        out += [(c, _to(jt, i, len(body)), _to(jf, i, len(body)), k) for i, (c, jt, jf, k) in enumerate(body)]
        out.append((_RET, 0, 0, eperm))
    return out


def seccomp_program(
    block_network: bool,
    block_process_creation: bool,
    block_exec: bool,
    block_admin: bool = True,
    arch: str = "",
    *,
    block_stop_signals: bool = True,
    own_pid: int = 0,
) -> bytes:
    """The seccomp-BPF program of the sandbox, 8 bytes per ``struct sock_filter``, native byte order.

    Denied calls return EPERM, ``clone3`` returns ENOSYS (glibc then falls back to ``clone``, whose CLONE_THREAD flag
    BPF can read), ``socket`` is allowed for AF_UNIX only, ``prlimit64`` only without a new limit. Other
    architectures (i386 via ``int 0x80``) and x32 numbers get EPERM for everything.

    Args:
        block_network: Deny non-Unix sockets and io_uring (which could open sockets unseen).
        block_process_creation: Deny fork, vfork, and clone without CLONE_THREAD; threads keep working.
        block_exec: Deny execve and execveat.
        block_admin: Deny ptrace, module loading, mounts, namespaces, raising limits, chmod/chown/xattr, keyrings.
        arch: ``x86_64`` or ``aarch64``; empty means this machine.
        block_stop_signals: Refuse stop signals sent by any route the caller controls (kill, tkill, tgkill,
            rt_(tg)sigqueueinfo, pidfd_send_signal, fcntl F_SETSIG, tty ioctls TIOCSIG/TIOCSTI, timer_create and
            mq_notify with a sigevent): a stopped worker is the host's infra_error, so it must never be the
            candidate's doing. A worker (``block_process_creation``) also keeps its parent-death signal.
        own_pid: When non-zero (Landlock's signal scope missing), signals may go only to this pid and its threads.
    """
    arch = arch or platform.machine()
    nr, audit_arch = syscall_numbers(arch), _ARCHES[arch][1]
    on = {"network": block_network, "processes": block_process_creation, "exec": block_exec, "admin": block_admin}
    eperm, lo = RET_ERRNO | _EPERM, lambda i: 16 + 8 * i  # offset of args[i]'s low word in seccomp_data
    p: list[tuple[int, int, int, int]] = [(_LD, 0, 0, 4), (_JEQ, 1, 0, audit_arch), (_RET, 0, 0, eperm), (_LD, 0, 0, 0)]
    if arch == "x86_64":
        p += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, eperm)]  # __X32_SYSCALL_BIT
    for name in (n for g, names in _GROUPS.items() if on[g] for n in names if n in nr):
        kind = _SPECIAL.get(name, "deny")
        if kind in ("deny", "enosys"):
            p += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eperm if kind == "deny" else RET_ERRNO | _ENOSYS)]
        elif kind == "socket":
            p += [(_JEQ, 0, 4, nr[name]), (_LD, 0, 0, lo(0)), (_JEQ, 0, 1, _AF_UNIX), (_RET, 0, 0, _RET_ALLOW)]
            p += [(_RET, 0, 0, eperm)]
        elif kind == "clone":
            p += [(_JEQ, 0, 4, nr[name]), (_LD, 0, 0, lo(0)), (_JSET, 0, 1, _CLONE_THREAD), (_RET, 0, 0, _RET_ALLOW)]
            p += [(_RET, 0, 0, eperm)]
        else:  # prlimit64: allowed only when new_limit (args[2], 64 bits) is NULL
            p += [(_JEQ, 0, 6, nr[name]), (_LD, 0, 0, lo(2)), (_JEQ, 0, 3, 0), (_LD, 0, 0, lo(2) + 4)]
            p += [(_JEQ, 0, 1, 0), (_RET, 0, 0, _RET_ALLOW), (_RET, 0, 0, eperm)]
    if block_stop_signals:
        p += _signal_rules(nr, own_pid, eperm, block_process_creation)
    p.append((_RET, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in p)
