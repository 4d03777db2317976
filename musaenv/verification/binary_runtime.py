"""Imports that only a statically linked C++ runtime makes: the toolchain's code inside a module, not the candidate's.

A toolchain that links ``libstdc++`` (or ``libgcc_eh``) statically puts the runtime's own code into every module it
links, with the runtime's own imports: ``std::random_device`` opens ``/dev/urandom`` (``open``), the emergency
exception pool reads its tunables (``secure_getenv``), ``__cxa_guard_acquire`` waits on a futex (``syscall``).
Seen on the H200 machine of docs/gpu-validation.md, where every honest CUDA module imported those three and was
refused by :mod:`.binary_imports`. Here one flagged import is excused only when every instruction that references it
lies in a function that is the toolchain's own: a function of the same (mangled) name is defined by one of the
compiler's static runtime archives (``c++ -print-file-name=libstdc++.a`` ...), and the module's copy has the
archive's instruction sequence, mnemonic by mnemonic, with the same named target on every call and jump that leaves
the function. A reference from any other function, a data relocation against the import (its address stored), or an
archive that cannot be read leaves the finding as it was.

What it does not prove: the operands that are not call targets (a forged twin could load another string, so open
another file read-only). The source checks and the sandbox stay in force for that.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["RUNTIME_ARCHIVES", "runtime_archives", "runtime_only_imports"]

RUNTIME_ARCHIVES = ("libstdc++.a", "libsupc++.a", "libgcc_eh.a", "libgcc.a")
_BLOCK = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(?P<text>\S.*)$")
_RELOC = re.compile(r"^\s*[0-9a-f]+: R_\w+\s+(?P<sym>\S+)$")
_TARGET = re.compile(r"<(?P<name>[^>]+)>")
_PREFIXES = {"addr32", "notrack", "bnd", "data16", "cs", "ds", "lock", "rex", "rex.W"}
_NOPS = {"nop", "nopw", "nopl", "xchg", "int3", "hlt"}
# Dynamic relocations a call or a GOT load needs; any other kind stores the import's address somewhere.
_CODE_RELOCS = ("R_X86_64_JUMP_SLOT", "R_X86_64_GLOB_DAT", "R_AARCH64_JUMP_SLOT", "R_AARCH64_GLOB_DAT")


def _run(cmd: list[str], timeout: float = 120) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise OSError(f"{cmd[0]} failed: {out.stderr.strip()[:300]}")
    return out.stdout


@functools.lru_cache(maxsize=4)
def runtime_archives(cxx: str | None = None) -> tuple[str, ...]:
    """The static runtime archives of the compiler that links modules (``$CXX``, else ``c++``), those that exist."""
    cmd = shlex.split(cxx or os.environ.get("CXX", "c++"))
    found = []
    for name in RUNTIME_ARCHIVES:
        try:
            path = _run([*cmd, f"-print-file-name={name}"], timeout=30).strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if os.path.isabs(path) and os.path.isfile(path):
            found.append(os.path.realpath(path))
    return tuple(dict.fromkeys(found))


@functools.lru_cache(maxsize=8)
def _archive_index(path: str, mtime_ns: int) -> dict[str, str]:
    """Function symbol (mangled) -> the archive member that defines it (the first one)."""
    index: dict[str, str] = {}
    for line in _run(["nm", "-A", "--defined-only", path]).splitlines():
        head, _, rest = line.rpartition(":")
        parts = rest.split()
        if len(parts) == 3 and parts[1] in "TtWw":
            index.setdefault(parts[2], head[len(path) + 1 :])
    return index


def _blocks(disassembly: str) -> dict[str, list[str]]:
    """Function name -> its lines (instructions and relocations), from ``objdump -d`` output."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in disassembly.splitlines():
        m = _BLOCK.match(line)
        if m:
            current = blocks.setdefault(m.group("name"), [])
        elif current is not None and line.strip():
            current.append(line)
    return blocks


def _target(name: str) -> str:
    return re.split(r"[+-]0x|@", name, maxsplit=1)[0]


def _normal(lines: list[str], own: str) -> list[str]:
    """One token per instruction: the mnemonic (``lea`` read as ``mov``: the linker relaxes GOT loads), and for a
    call or jump the name of its target; a relocation line names the target of the instruction before it."""
    tokens: list[str] = []
    for line in lines:
        r = _RELOC.match(line)
        if r:
            if tokens and tokens[-1].split(" ")[0] in ("call", "jmp"):
                sym = _target(r.group("sym"))
                tokens[-1] = f"{tokens[-1].split(' ')[0]} {'<local>' if sym.startswith('.') else sym}"
            continue
        m = _INSN.match(line)
        if not m:
            continue
        words = [w for w in m.group("text").split() if w not in _PREFIXES]
        if not words:
            continue
        mnemonic = {"lea": "mov", "callq": "call", "jmpq": "jmp"}.get(words[0], words[0])
        if mnemonic in ("call", "jmp"):
            t = _TARGET.search(m.group("text"))
            name = _target(t.group("name")) if t else "<indirect>"
            tokens.append(f"{mnemonic} {'<self>' if name == own else name}")
        else:
            tokens.append(mnemonic)
    while tokens and tokens[-1].split(" ")[0] in _NOPS:
        tokens.pop()
    return tokens


def _same(a: list[str], b: list[str]) -> bool:
    """Equal token lists, where ``<local>`` (a call the archive resolved to a section symbol) matches any target."""
    if len(a) != len(b):
        return False
    return all(x == y or (x.split(" ")[0] == y.split(" ")[0] and "<local>" in (x + y)) for x, y in zip(a, b))


def _archive_function(archive: str, member: str, name: str) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="musaenv-rt-") as tmp:
        obj = Path(tmp) / "member.o"
        data = subprocess.run(["ar", "p", archive, member], capture_output=True, timeout=60).stdout
        obj.write_bytes(data)
        dis = _run(["objdump", "-dr", "--no-show-raw-insn", f"--disassemble={name}", str(obj)])
    return _blocks(dis).get(name, [])


def _is_twin(name: str, lines: list[str], archives: tuple[str, ...]) -> bool:
    for archive in archives:
        member = _archive_index(archive, os.stat(archive).st_mtime_ns).get(name)
        if member is not None:
            return _same(_normal(lines, name), _normal(_archive_function(archive, member, name), name))
    return False


def runtime_only_imports(so_path: Path, names: Iterable[str], cxx: str | None = None) -> set[str]:
    """Which of ``names`` (plain imported C names) the module references only from the toolchain's own runtime code.

    Raises:
        OSError: binutils missing or failing (the caller keeps its findings).
    """
    wanted = set(names)
    archives = runtime_archives(cxx)
    if not wanted or not archives:
        return set()
    stored = set()
    for line in _run(["objdump", "-R", str(so_path)]).splitlines():
        parts = line.split()
        if len(parts) == 3 and _target(parts[2]) in wanted and parts[1] not in _CODE_RELOCS:
            stored.add(_target(parts[2]))
    callers: dict[str, set[str]] = {n: set() for n in wanted - stored}
    blocks = _blocks(_run(["objdump", "-d", "--no-show-raw-insn", str(so_path)]))
    for fn, lines in blocks.items():
        if fn.endswith("@plt") or fn.startswith("."):
            continue  # the PLT stubs themselves
        for line in lines:
            for t in _TARGET.findall(line):
                if _target(t) in callers:
                    callers[_target(t)].add(fn)
    twins: dict[str, bool] = {}
    excused = set()
    for imp, fns in callers.items():
        if fns and all(twins.setdefault(f, _is_twin(f, blocks[f], archives)) for f in fns):
            excused.add(imp)
    return excused
