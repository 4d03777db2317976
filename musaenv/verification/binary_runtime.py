"""What a statically linked C++ runtime brings into a module: the toolchain's code, not the candidate's.

A toolchain that links ``libstdc++`` (or ``libgcc_eh``) statically puts the runtime's own code into every module it
links, with the runtime's own imports: ``std::random_device`` opens ``/dev/urandom`` (``open``), the emergency
exception pool reads its tunables (``secure_getenv``), ``__cxa_guard_acquire`` waits on a futex (``syscall``).
Seen on the H200 machine of docs/gpu-validation.md, where every honest CUDA module imported those three and was
refused by :mod:`.binary_imports`. Both rules here rest on *twins*: a function of the module that one of the
compiler's static runtime archives (``c++ -print-file-name=libstdc++.a`` ...) defines under the same mangled name,
whose instructions within its symbol's size match the archive's mnemonic by mnemonic, with the same offset on every
branch inside it and the same named target on every call and jump that leaves it.

* :func:`runtime_only_imports`: a flagged import is excused only when every instruction that references it lies in
  a twin, and no data relocation stores its address.
* :func:`runtime_calls`: the runtime's judged C++ functions (``std::basic_filebuf::open``) are then defined in the
  module instead of imported, so the import check cannot see a candidate call them: they are judged when code that
  is not a twin names them, or a data relocation outside the runtime's own objects stores their address.

An archive that cannot be read leaves the findings as they were. What it does not prove: operands that are not
branch targets (a forged twin could load another string, so open another file read-only), and the contents of a
data object that carries a runtime object's name. The source checks and the sandbox stay in force for those.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["RUNTIME_ARCHIVES", "runtime_archives", "runtime_calls", "runtime_only_imports"]

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
        if len(parts) == 3 and parts[1] in "TtWwDdRrVvBb":  # functions, and data (vtables) for _stored
            index.setdefault(parts[2], head[len(path) + 1 :])
    return index


def _sizes(path: str) -> dict[str, int]:
    """Function symbol -> its size in bytes (``nm -S``): where a function ends, not where the next one starts."""
    return {name: size for name, (_, size) in _symbols(path).items()}


def _blocks(disassembly: str, sizes: dict[str, int] | None = None) -> dict[str, list[str]]:
    """Function name -> its lines (instructions and relocations), from ``objdump -d`` output; with ``sizes``, only
    the lines inside the function's own bytes (the padding and whatever follows it are not the function)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    end = -1
    for line in disassembly.splitlines():
        m = _BLOCK.match(line)
        if m:
            current = blocks.setdefault(m.group("name"), [])
            size = (sizes or {}).get(m.group("name"))
            end = int(line.split()[0], 16) + size if size is not None else -1
        elif current is not None and line.strip():
            addr = line.split(":", 1)[0].strip()
            if end >= 0 and re.fullmatch(r"[0-9a-f]+", addr) and int(addr, 16) >= end:
                continue
            current.append(line)
    return blocks


def _target(name: str) -> str:
    return re.split(r"[+-]0x|@", name, maxsplit=1)[0]


def _normal(lines: list[str], own: str) -> list[str]:
    """One token per instruction: the mnemonic (``lea`` read as ``mov``: the linker relaxes GOT loads), and for a
    branch or call its target: an offset inside the function, or another function's name. A relocation line (an
    archive member's) names the target of the branch before it; one against a section (``.text.unlikely``: the
    function's cold part, a local function) is ``<local>``."""
    tokens: list[str] = []
    for line in lines:
        r = _RELOC.match(line)
        if r:
            head = tokens[-1].split(" ")[0] if tokens else ""
            if head.startswith("j") or head == "call":
                sym = _target(r.group("sym"))
                tokens[-1] = f"{head} {'<local>' if sym.startswith('.') else sym}"
            continue
        m = _INSN.match(line)
        words = [w for w in m.group("text").split() if w not in _PREFIXES] if m else []
        if not m or not words:
            continue
        mnemonic = {"lea": "mov", "callq": "call", "jmpq": "jmp"}.get(words[0], words[0])
        if not (mnemonic.startswith("j") or mnemonic == "call"):
            tokens.append(mnemonic)  # data operands are not compared (see the module's docstring)
            continue
        t = _TARGET.search(m.group("text"))
        if t is None:
            tokens.append(f"{mnemonic} <indirect>")
        elif _target(t.group("name")) == own:  # a branch inside the function: its offset must match too
            tokens.append(f"{mnemonic} <self>{t.group('name')[len(own) :]}")
        else:
            tokens.append(f"{mnemonic} {_target(t.group('name'))}")
    while tokens and tokens[-1].split(" ")[0] in _NOPS:
        tokens.pop()
    return tokens


def _same(a: list[str], b: list[str]) -> bool:
    """Equal token lists, where ``<local>`` (a call the archive resolved to a section symbol) matches any target."""
    if len(a) != len(b):
        return False
    return all(x == y or (x.split(" ")[0] == y.split(" ")[0] and "<local>" in (x + y)) for x, y in zip(a, b))


@functools.lru_cache(maxsize=32)
def _member_blocks(archive: str, member: str) -> dict[str, list[str]]:
    """Every function of one archive member, disassembled with its relocations (``objdump -dr``)."""
    with tempfile.TemporaryDirectory(prefix="musaenv-rt-") as tmp:
        obj = Path(tmp) / "member.o"
        data = subprocess.run(["ar", "p", archive, member], capture_output=True, timeout=60).stdout
        obj.write_bytes(data)
        return _blocks(_run(["objdump", "-dr", "--no-show-raw-insn", str(obj)]), _sizes(str(obj)))


class _Module:
    """One built module, disassembled once, and which of its functions are the toolchain's runtime (twins)."""

    def __init__(self, so_path: Path, archives: tuple[str, ...]) -> None:
        self.path, self.archives = str(so_path), archives
        self.symbols = _symbols(self.path)
        self.blocks = _blocks(_run(["objdump", "-d", "--no-show-raw-insn", self.path]),
                              {n: size for n, (_, size) in self.symbols.items()})  # fmt: skip
        self.dynamic = [line.split() for line in _run(["objdump", "-R", self.path]).splitlines()]
        self._twins: dict[str, bool] = {}

    def is_twin(self, name: str) -> bool:
        if name not in self._twins:
            self._twins[name] = False
            for archive in self.archives:
                member = _archive_index(archive, os.stat(archive).st_mtime_ns).get(name)
                if member is not None:
                    theirs = _member_blocks(archive, member).get(name, [])
                    self._twins[name] = _same(_normal(self.blocks.get(name, []), name), _normal(theirs, name))
                    break
        return self._twins[name]

    def referrers(self, targets: set[str]) -> dict[str, set[str]]:
        """Target -> the functions whose instructions name it (a call, a jump, an address loaded)."""
        found: dict[str, set[str]] = {t: set() for t in targets}
        for fn, lines in self.blocks.items():
            if fn.endswith("@plt") or fn.startswith("."):
                continue  # the PLT stubs themselves
            for line in lines:
                for t in _TARGET.findall(line):
                    if _target(t) in found and _target(t) != fn:
                        found[_target(t)].add(fn)
        return found


def _nm(path: str) -> list[tuple[int, int, str, str]]:
    """Defined symbols with a size: ``(address, size, type letter, mangled name)``, one ``nm -S`` pass."""
    st = os.stat(path)
    return _nm_cached(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _nm_cached(path: str, size: int, mtime_ns: int) -> list[tuple[int, int, str, str]]:
    out = []
    for line in _run(["nm", "-S", "--defined-only", path]).splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append((int(parts[0], 16), int(parts[1], 16), parts[2], parts[3]))
    return out


def _symbols(path: str) -> dict[str, tuple[int, int]]:
    """Function symbol -> (address, size)."""
    out: dict[str, tuple[int, int]] = {}
    for addr, size, kind, name in _nm(path):
        if kind in "TtWw":
            out.setdefault(name, (addr, size))
    return out


@functools.lru_cache(maxsize=64)
def _module(so_path: str, size: int, mtime_ns: int, archives: tuple[str, ...]) -> _Module:
    return _Module(Path(so_path), archives)


def _load(so_path: Path, cxx: str | None) -> _Module | None:
    archives = runtime_archives(cxx)
    if not archives:
        return None
    st = so_path.stat()
    return _module(str(so_path), st.st_size, st.st_mtime_ns, archives)


def runtime_only_imports(so_path: Path, names: Iterable[str], cxx: str | None = None) -> set[str]:
    """Which of ``names`` (plain imported C names) the module references only from the toolchain's own runtime code.

    Raises:
        OSError: binutils missing or failing (the caller keeps its findings).
    """
    wanted = set(names)
    mod = _load(so_path, cxx) if wanted else None
    if mod is None:
        return set()
    stored = {_target(p[2]) for p in mod.dynamic if len(p) == 3 and p[1] not in _CODE_RELOCS}  # address kept in data
    return {imp for imp, fns in mod.referrers(wanted - stored).items() if fns and all(map(mod.is_twin, fns))}


def runtime_calls(
    so_path: Path, judge: Callable[[str], tuple[str, bool] | None], cxx: str | None = None
) -> dict[str, tuple[str, bool]]:
    """Judged functions the module defines (a static runtime's ``std::basic_filebuf::open``: no import shows it)
    that code other than the runtime's calls or loads, or whose address a data relocation stores.

    Args:
        judge: ``(flag, policy_dependent)`` or ``None`` for a demangled name (the import check's judge).

    Returns:
        Demangled name -> its judgement.

    Raises:
        OSError: binutils missing or failing.
    """
    archives = runtime_archives(cxx)
    if not archives:
        return {}
    in_runtime = set().union(*(_archive_index(a, os.stat(a).st_mtime_ns) for a in archives))
    names = [m for m in _symbols(str(so_path)) if m in in_runtime]  # only these can be the runtime's
    demangled = _run_input(["c++filt"], "\n".join(names)).splitlines() if names else []
    judged = {m: (d, v) for m, d in zip(names, demangled) if (v := judge(d)) is not None}
    mod = _load(so_path, cxx) if judged else None
    if mod is None:  # the usual case: the runtime is a shared library, and its functions are imports
        return {}
    judged = {m: j for m, j in judged.items() if mod.is_twin(m)}  # a candidate's own std:: function is its import
    stored = _stored(mod, set(judged), in_runtime)
    reached = {t for t, fns in mod.referrers(set(judged)).items() if any(not mod.is_twin(f) for f in fns)}
    return {judged[m][0]: judged[m][1] for m in stored | reached}


def _stored(mod: _Module, names: set[str], runtime_names: set[str]) -> set[str]:
    """Which of ``names`` have their address kept in data (a dynamic relocation other than a PLT slot: against the
    symbol, or ``R_*_RELATIVE`` to its address), outside the runtime's own data objects (its vtables list virtual
    functions of the file classes in every module that links it)."""
    addresses = {mod.symbols[n][0]: n for n in names}
    objects = sorted(_objects(mod.path))
    found = set()
    for parts in mod.dynamic:
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]+", parts[0]) or parts[1].endswith("JUMP_SLOT"):
            continue
        target = _target(parts[2])
        if parts[1].endswith("_RELATIVE") and parts[2].startswith("*ABS*+0x"):
            target = addresses.get(int(parts[2][len("*ABS*+") :], 16), "")
        if target in names and _container(objects, int(parts[0], 16)) not in runtime_names:
            found.add(target)
    return found


def _objects(path: str) -> list[tuple[int, int, str]]:
    """Data objects ``(address, size, name)``."""
    return [(addr, size, name) for addr, size, kind, name in _nm(path) if kind in "DdRrVvBb"]


def _container(objects: list[tuple[int, int, str]], offset: int) -> str:
    for start, size, name in objects:
        if start <= offset < start + size:
            return name
    return ""


def _run_input(cmd: list[str], text: str) -> str:
    out = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise OSError(f"{cmd[0]} failed: {out.stderr.strip()[:300]}")
    return out.stdout
