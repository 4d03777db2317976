"""Torch's compiler command for one extension, and how the C++ toolchains run a compiler.

:func:`torch_flags` reads torch's compile and link flags once per toolchain (torch writes a ninja file with marker
values, :func:`_template_from_torch`; the template is kept on disk under the cache) and fills in a candidate's
module name, flags and include paths as ``load_inline`` would: a :class:`CompileFlags`, whose keys name the
precompiled headers (:mod:`musaenv.toolchains.cpp.pch`) and binding objects (:mod:`musaenv.toolchains.cpp.bindobj`)
that serve it. :func:`run_tool` runs a compiler (stoppable inside :func:`musaenv.toolchains.stopping.stoppable`),
:func:`file_lock` and :func:`unique_suffix` let concurrent builders share the cache's files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import os
import shlex
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from musaenv.toolchains import stopping
from musaenv.toolchains.cpp.flagkeys import bind_key_flags, pch_key_flags

__all__ = ["PCH_TIMEOUT_S", "CompileFlags", "digest", "file_lock", "run_tool", "torch_flags", "unique_suffix"]

# The longest one compiler run may take (a precompiled header's build is the longest).
PCH_TIMEOUT_S = 600.0

_NAME_MARK = "musaenv_mark_name"
_CFLAG_MARK = "-DMUSAENV_MARK_CFLAGS"
_INCLUDE_MARK = "/musaenv_mark_include"
_LDFLAG_MARK = "-Wl,--musaenv-mark-ldflags"


@dataclass(frozen=True)
class CompileFlags:
    """Compiler command pieces for one extension, exactly as torch's ninja file would have them.

    Attributes:
        cxx: The compiler command (``$CXX`` or ``c++``), split.
        cflags: Flags of the compile rule, including ``-DTORCH_EXTENSION_NAME=<name>`` and the candidate's flags.
        ldflags: Flags of the link rule (``-shared``, torch's libraries, the candidate's flags).
        user: The candidate's own compile flags (a slice of ``cflags``, from ``user_at``).
        user_at: Where ``user`` starts in ``cflags``.
        toolchain: torch, Python and compiler versions (:func:`musaenv.toolchains.buildspec.toolchain_fingerprint`).
            Part of every key: GCC uses a precompiled header whatever became of the headers it was made from
            (tested), so one made from an older torch's headers must never serve a newer torch.
    """

    cxx: tuple[str, ...]
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    user: tuple[str, ...] = ()
    user_at: int = -1
    toolchain: str = ""

    def _with_user(self, user: Sequence[str]) -> tuple[str, ...]:
        at = self.user_at if self.user_at >= 0 else len(self.cflags)
        flags = (*self.cflags[:at], *user, *self.cflags[at + len(self.user) :])
        return tuple(f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME="))

    def pch_flags(
        self, sensitive_macros: Sequence[str] = (), omp_shared: bool = False, isa_shared: bool = False
    ) -> tuple[str, ...]:
        """The flags a precompiled header for this build is made with: torch's, and of the candidate's only those
        a header depends on (:func:`musaenv.toolchains.cpp.flagkeys.pch_key_flags`); never the module name."""
        return self._with_user(pch_key_flags(self.user, sensitive_macros, omp_shared, isa_shared))

    def without(self, tokens: set[str]) -> CompileFlags:
        """These flags less the candidate's ``tokens`` (a unit that takes its extensions by pragma instead)."""
        at = self.user_at if self.user_at >= 0 else len(self.cflags)
        user = tuple(t for t in self.user if t not in tokens)
        cflags = (*self.cflags[:at], *user, *self.cflags[at + len(self.user) :])
        return CompileFlags(self.cxx, cflags, self.ldflags, user, self.user_at, self.toolchain)

    def bind_flags(self) -> tuple[str, ...]:
        """The flags the binding objects are compiled with (:func:`musaenv.toolchains.cpp.flagkeys.bind_key_flags`)."""
        return self._with_user(bind_key_flags(self.user))

    def key(self, sensitive_macros: Sequence[str] = (), omp_shared: bool = False, isa_shared: bool = False) -> str:
        """Content hash of the toolchain, the compiler and the flags a precompiled header depends on."""
        return digest([self.toolchain, self.cxx, self.pch_flags(sensitive_macros, omp_shared, isa_shared)])

    def bind_key(self) -> str:
        """Content hash of the toolchain, the compiler and the flags the binding objects depend on."""
        return digest([self.toolchain, self.cxx, self.bind_flags(), "python.h"])


def digest(value: Any) -> str:
    """A short content hash of a JSON value (the keys of headers, binding objects and their records)."""
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def _split_user_flags(flags: Sequence[str]) -> list[str]:
    # torch strips each flag and joins them into a ninja variable that a shell splits again.
    joined = " ".join(f.strip() for f in flags)
    return shlex.split(joined) if joined else []


def _template_from_torch() -> dict[str, Any]:
    """Ask this torch for its compile and link flags by letting it write a ninja file with marker values."""
    import torch.utils.cpp_extension as ce

    def call(fn: Any, **values: Any) -> Any:
        params = inspect.signature(fn).parameters
        missing = [p for p, v in params.items() if p not in values and v.default is inspect.Parameter.empty]
        if missing:
            raise RuntimeError(f"{fn.__name__} wants {missing}; this torch is not supported by the fast builder")
        return fn(**{k: v for k, v in values.items() if k in params})

    common = {"with_cuda": False, "with_sycl": False, "verbose": False, "is_standalone": False}
    ldflags = call(ce._prepare_ldflags, extra_ldflags=[_LDFLAG_MARK], **common)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "main.cpp")
        Path(src).write_text("")
        path = os.path.join(d, "build.ninja")
        call(
            ce._write_ninja_file_to_build_library,
            path=path, name=_NAME_MARK, sources=[src], extra_cflags=[_CFLAG_MARK], extra_cuda_cflags=[],
            extra_sycl_cflags=[], extra_ldflags=ldflags, extra_include_paths=[_INCLUDE_MARK], **common,
        )  # fmt: skip
        text = Path(path).read_text()
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key in ("cxx", "cflags", "ldflags"):
            found[key] = value
    if set(found) != {"cxx", "cflags", "ldflags"}:
        raise RuntimeError(f"unexpected ninja file from torch: {text[:400]}")
    return {k: shlex.split(v) for k, v in found.items()}


def torch_flags(
    cache: Path, name: str, extra_cflags: Sequence[str], extra_ldflags: Sequence[str], include_paths: Sequence[str]
) -> CompileFlags:
    """Torch's compile/link flags for extension ``name`` (the template is computed once per toolchain, on disk).

    Raises:
        RuntimeError: torch's private flag helpers changed shape (callers fall back to ``load_inline``).
        ValueError: the candidate's flags do not split like a shell would split them.
    """
    from musaenv.toolchains.buildspec import toolchain_fingerprint

    toolchain = toolchain_fingerprint()
    fp = hashlib.sha256(toolchain.encode()).hexdigest()[:16]
    path = cache / f"flags-{fp}.json"
    try:
        tpl = json.loads(path.read_text())
    except (OSError, ValueError):
        tpl = _template_from_torch()
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{unique_suffix()}.tmp")
        tmp.write_text(json.dumps(tpl))
        os.replace(tmp, path)
    user_c, user_ld = _split_user_flags(extra_cflags), _split_user_flags(extra_ldflags)
    includes = [f"-I{os.path.abspath(p.strip())}" for p in include_paths]
    cflags: list[str] = []
    user_at = -1
    for f in tpl["cflags"]:
        if f == f"-DTORCH_EXTENSION_NAME={_NAME_MARK}":
            cflags.append(f"-DTORCH_EXTENSION_NAME={name}")
        elif f == _CFLAG_MARK:
            user_at = len(cflags)
            cflags.extend(user_c)
        elif f == f"-I{_INCLUDE_MARK}":
            cflags.extend(includes)
        else:
            cflags.append(f)
    ldflags: list[str] = []
    for f in tpl["ldflags"]:
        ldflags.extend(user_ld if f == _LDFLAG_MARK else [f])
    return CompileFlags(tuple(tpl["cxx"]), tuple(cflags), tuple(ldflags), tuple(user_c), user_at, toolchain)


def run_tool(
    cmd: Sequence[str],
    cwd: Path,
    timeout_s: float = PCH_TIMEOUT_S,
    preexec: Callable[[], None] | None = None,
    tmpdir: Path | None = None,
) -> tuple[int, str]:
    """Run a compiler-like tool; returns (exit code, combined output). Raises ``OSError`` when it cannot start.

    ``preexec`` runs in the child before the tool (e.g. a further Landlock layer for a candidate's compile);
    ``tmpdir`` becomes its ``TMPDIR`` (where GCC writes its temporary files; such a layer allows no other place).
    Inside :func:`musaenv.toolchains.stopping.stoppable` the tool runs in its own process group, which the scope's
    :meth:`~musaenv.toolchains.stopping.StopScope.stop` kills (exit :data:`~musaenv.toolchains.stopping.STOPPED_RC`).
    """
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    scope = stopping.current()
    if scope is not None:
        return stopping.run_stoppable(scope, cmd, str(cwd), timeout_s, preexec, env)
    try:
        p = subprocess.run(
            list(cmd), cwd=str(cwd), capture_output=True, text=True, errors="replace", timeout=timeout_s,
            preexec_fn=preexec, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else str(e.stdout or "")
        return 124, out + f"\n{cmd[0]} timed out after {timeout_s:.0f} s"
    return p.returncode, (p.stdout or "") + (p.stderr or "")


def unique_suffix() -> str:
    """A file-name suffix no other builder uses: a confined build is pid 1 of its own namespace, so the pid alone
    is not unique (every builder would be ``1``)."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive ``flock`` on ``path``; the kernel drops it when the holder dies, so it can never go stale."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
