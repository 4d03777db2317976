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

The compiler's output is text the candidate's source can write (``#error``, ``#pragma message``, a ``#line`` file
name holding a newline), so text alone never decides: a kill is the machine's when a step's own exit status says
so (the builder records it; no candidate code runs there), or when the text reads like a kill *and* the kernel's
OOM-kill counter rose during the build (:func:`oom_kill_count`); a full disk when the builder's own write beside
the build fails (:func:`musaenv.toolchains.own_checks.out_of_space`). Text that reads like a fault and is not confirmed
(:func:`reads_like_fault`) makes the loader build once more: a real kill seldom strikes twice, so the second build
judges the source; text the source prints comes back, and is then its compile error, sealed on that second look.
A forger pays one more build and gets its -1.

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
from pathlib import Path
from typing import Any

__all__ = [
    "FAULT_RULES",
    "confirmed_fault",
    "machine_fault",
    "oom_kill_count",
    "oom_rose",
    "reads_like_fault",
    "step_fault",
]

FAULT_RULES = 2
"""Version of this rule. Change it whenever :func:`machine_fault` reads a failure differently."""

# Signals a compiler does not send itself: someone else ended it (the OOM killer sends SIGKILL).
_FOREIGN_SIGNALS = {signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
_SIGNAL_NAMES = "Killed|Terminated|Hangup|Interrupt"
_NUMBERS = "|".join(str(int(s)) for s in _FOREIGN_SIGNALS)
_SPAWN_FAILED = re.compile(
    r"\b(v?fork|posix_spawn|cannot execute[^\n]*?|pthread_create)[^\n]*?"
    r"(Resource temporarily unavailable|Cannot allocate memory)"
)
_KILLS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"\b({_SIGNAL_NAMES}) signal terminated program (\S+)"), "{1} was killed from outside ({0})"),
    (re.compile(rf"'([^']+)' died due to signal ({_NUMBERS})\b"), "{0} was killed from outside (signal {1})"),
    (re.compile(rf"\b(\S+) terminated with signal ({_NUMBERS})\b"), "{0} was killed from outside (signal {1})"),
)
_FAULTS: tuple[tuple[re.Pattern[str], str], ...] = (
    *_KILLS,
    (re.compile(r"No space left on device|Disk quota exceeded"), "the disk filled during the build"),
    (_SPAWN_FAILED, "the host could not start a compiler process ({1}: process table or memory exhausted)"),
    (re.compile(r"Too many open files( in system)?"), "the host's file table was exhausted (Too many open files)"),
)


def machine_fault(text: str) -> str | None:
    """What ``text`` (compiler, linker or build-tool output) says the machine did, or ``None``.

    Text only: the candidate's source can print any of it. Use :func:`confirmed_fault` to decide a verdict and
    this (through :func:`reads_like_fault`) only to keep such a failure out of the sealed cache.

    Args:
        text: Output of a failed build step or of a whole build.

    Returns:
        A one-line reason naming what was killed or exhausted.
    """
    return _first_match(text, _FAULTS)


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


def _first_match(text: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> str | None:
    for pattern, why in rules:
        m = pattern.search(text)
        if m is not None:
            return why.format(*(g.strip("\"'$") if g else "" for g in m.groups()))
    return None


def reads_like_fault(text: str) -> bool:
    """True when ``text`` reads like a machine fault (:func:`machine_fault`): such a failure is built once more before
    it is sealed, since a real fault the machine could not confirm must not stick to the sources in the cache."""
    return machine_fault(text) is not None


def confirmed_fault(text: str, steps: Iterable[Mapping[str, Any]], oom_rose: bool) -> str | None:
    """Why a failed build was the machine's, decided by what the candidate cannot write, or ``None``.

    Args:
        text: The build's output (only read to name the killed program, when the kernel confirms a kill).
        steps: The builder's step records (exit statuses: :func:`step_fault`).
        oom_rose: The kernel's OOM-kill counter rose while the build ran (:func:`oom_kill_count`).
    """
    by_status = step_fault(steps)
    if by_status is not None:
        return by_status
    killed = _first_match(text, _KILLS)
    if killed is not None and oom_rose:
        return f"{killed}; the kernel's OOM killer acted during the build"
    return None


def oom_kill_count() -> int | None:
    """Processes the kernel's OOM killer has killed since boot (``oom_kill`` of ``/proc/vmstat``, Linux >= 4.13);
    ``None`` when unreadable (no confirmation then: the text stays the candidate's, unsealed)."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def oom_rose(before: int | None) -> bool:
    """True when the OOM-kill counter is above ``before`` (a reading of :func:`oom_kill_count`)."""
    after = oom_kill_count()
    return before is not None and after is not None and after > before
