"""Which failed builds are the machine's: the rule that keeps a host's fault from becoming a candidate's verdict.

A compile error is sealed and served from the cache (the same sources fail the same way), so it must be one: a
compiler that ran to completion and reported a diagnostic about the candidate's source. Everything else that ends a
build is the machine's (``infra_error``, retried, never sealed):

* a compiler, assembler or linker ended by a signal it did not raise itself: SIGKILL (the kernel's OOM killer, an
  operator), SIGTERM, SIGHUP, SIGINT. gcc's driver says ``Killed signal terminated program cc1plus``, nvcc
  ``'cicc' died due to signal 9 (Kill signal)``, collect2 ``ld terminated with signal 9 [Killed]``; a step whose own
  process was signalled has a negative exit code;
* a full disk or quota (``No space left on device``, ``Disk quota exceeded``);
* an exhausted process or file table, or memory the kernel refused to a new process: ``fork``/``vfork``/``execute``
  failing with ``Resource temporarily unavailable``, ``Cannot allocate memory``, ``Too many open files``.

Not covered on purpose: ``cc1plus: out of memory allocating`` (the compiler ran into its own address-space limit,
:data:`musaenv.isolation.build_jail.BUILD_ADDRESS_SPACE_MB`: a runaway instantiation, the source's), a CPU-second
limit (the caller kills the step and knows), an internal compiler error (SIGSEGV, SIGABRT: raised inside the
compiler by that source, reproducibly).

:data:`FAULT_RULES` names this rule; sealed failure records carry it, and one sealed under another rule is built
again rather than served (an upgrade that reads more failures as the machine's drops what the old rule sealed).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["FAULT_RULES", "machine_fault", "step_fault"]

FAULT_RULES = 1
"""Version of this rule. Change it whenever :func:`machine_fault` reads a failure differently."""

# Signals a compiler does not send itself: someone else ended it (the OOM killer sends SIGKILL).
_FOREIGN_SIGNALS = {signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
_SIGNAL_NAMES = "Killed|Terminated|Hangup|Interrupt"
_NUMBERS = "|".join(str(int(s)) for s in _FOREIGN_SIGNALS)
_SPAWN_FAILED = re.compile(
    r"\b(v?fork|posix_spawn|cannot execute[^\n]*?|pthread_create)[^\n]*?"
    r"(Resource temporarily unavailable|Cannot allocate memory)"
)
_FAULTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"\b({_SIGNAL_NAMES}) signal terminated program (\S+)"), "{1} was killed from outside ({0})"),
    (re.compile(rf"'([^']+)' died due to signal ({_NUMBERS})\b"), "{0} was killed from outside (signal {1})"),
    (re.compile(rf"\b(\S+) terminated with signal ({_NUMBERS})\b"), "{0} was killed from outside (signal {1})"),
    (re.compile(r"No space left on device|Disk quota exceeded"), "the disk filled during the build"),
    (_SPAWN_FAILED, "the host could not start a compiler process ({1}: process table or memory exhausted)"),
    (re.compile(r"Too many open files( in system)?"), "the host's file table was exhausted (Too many open files)"),
)


def machine_fault(text: str) -> str | None:
    """Why ``text`` (compiler, linker or build-tool output) shows the machine failed, or ``None``.

    Args:
        text: Output of a failed build step or of a whole build.

    Returns:
        A one-line reason naming what was killed or exhausted, for the ``infra_error``'s message.
    """
    for pattern, why in _FAULTS:
        m = pattern.search(text)
        if m is not None:
            return why.format(*(g.strip("\"'$") if g else "" for g in m.groups()))
    return None


def step_fault(steps: Iterable[Mapping[str, Any]]) -> str | None:
    """Why one of a build's steps (``{"name", "returncode", "timed_out", "note"}`` records) was ended by the machine,
    or ``None``.

    A step's process killed by a foreign signal has a negative exit status; one that ran its compiler through a shell
    (nvcc runs cicc and ptxas through ``sh -c``) exits with 128 + the signal (137 for SIGKILL), the shell printing
    ``Killed``. A step the build service ended itself (its time limit, or another step failed first: ``stopped``
    in its note) was killed by us, and is not counted here.
    """
    foreign = {int(x) for x in _FOREIGN_SIGNALS}
    for s in steps:
        rc = s.get("returncode")
        if not isinstance(rc, int) or s.get("timed_out") or "stopped" in str(s.get("note", "")):
            continue
        sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
        if sig in foreign:
            return f"the {s.get('name', 'build')} step was killed from outside ({signal.Signals(sig).name})"
    return None
