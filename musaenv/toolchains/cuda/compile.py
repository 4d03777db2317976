"""Compile-only checking of CUDA candidates on a machine with nvcc but no GPU.

Mirrors what ``torch.utils.cpp_extension.load_inline`` would build, short of loading it:

* ``cuda.cu``: ``#include <torch/types.h>``, ``<cuda.h>``, ``<cuda_runtime.h>`` (load_inline prepends these)
  followed by the CUDA sources, compiled by ``nvcc -c`` for one architecture: nvcc's front end, device code
  generation and ``ptxas`` (register and shared-memory limits), and g++ on the host half.
* ``main.cpp``: ``#include <torch/extension.h>``, the C++ sources and the pybind11 module load_inline
  generates for ``functions``, compiled by ``c++ -c``.
* ``link``: the objects linked as torch links them, every symbol resolved (:mod:`musaenv.toolchains.cuda.link`),
  and ``PyInit_<name>`` present: ``ok`` means the module would import, not only that its files compile.

Both compile steps run in parallel, each in its own process group that is killed on timeout or as soon as the
other step failed (a kernel error does not wait for the C++ step); the link follows.
Compiler and linker output comes back verbatim, failing steps first. Measured costs and what is and is not
checked: ``docs/musa.md``.

Size: the CUDA compile-only check in one place (commands, steps, logs, link, the inconclusive rules); it moves into
a CUDA toolchain folder with issue 30 step 3.
"""
# Kept whole for now (~455 lines): the step runner (_Step, _start, _finish, _run, _kill) is the seam for a module
# of its own, but build/cuda_fast.py imports it from here and is edited on another branch: move it with them.

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from musaenv import _env
from musaenv.errors import BackendUnavailableError
from musaenv.toolchains.cuda.link import judge_link, link_plan, missing_module_init
from musaenv.toolchains.faults import confirmed_fault, oom_kill_count, oom_rose

__all__ = ["CHECK_VERSION", "CompileCheck", "cuda_compile_check"]

# Part of the cached verdict's name: bump it when the check's commands change, so verdicts of the old commands
# are not reused (2: torch <= 2.8's shell-quoted pybind11 ABI defines are split as a shell would; 3: objects are
# linked and resolved, and the module must define its PyInit).
CHECK_VERSION = 3

logger = logging.getLogger(__name__)

# load_inline's implicit headers for cuda_sources (torch/utils/cpp_extension.py, every torch >= 2.4).
_CUDA_PRELUDE = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")
_POLL_S = 0.25  # how often a running step's CPU seconds are read
_EXTENSION_NAME = "musaenv_compile_check"  # the module's name: PyInit_musaenv_compile_check must be defined
_ARCH_FLAG = re.compile(r"-arch(=|$)|--gpu-architecture|-gencode|--generate-code|-code(=|$)|--gpu-code")
# Headers a CUDA build of torch or a full CUDA toolkit has and this machine may lack: failing on one of
# them says nothing about the candidate.
_ENV_HEADER = re.compile(r"(cu(blas|sparse|solver|rand|fft|dnn)\w*|nccl|nvToolsExt|nvtx3/\S+)\.h$")
_MISSING_HEADER = re.compile(r"fatal error: (\S+): No such file or directory|cannot open source file \"([^\"]+)\"")


@dataclass(frozen=True)
class CompileCheck:
    """Outcome of :func:`cuda_compile_check`.

    Attributes:
        ok: Every step compiled.
        log: Compiler output verbatim, failing steps first, each under a ``== step: ...`` line.
        seconds: Wall time of the whole check.
        steps: One JSON-safe dict per step: ``name``, ``command`` (argv), ``returncode`` (``None`` when
            killed or skipped), ``seconds``, ``timed_out``, ``note``.
        inconclusive: Set when the check failed only because this machine lacks a header that a CUDA
            build of torch or a full CUDA toolkit has (e.g. ``cusparse.h``); the candidate may be fine.
    """

    ok: bool
    log: str
    seconds: float
    steps: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    inconclusive: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        return {
            "ok": self.ok,
            "log": self.log,
            "seconds": self.seconds,
            "steps": [dict(s) for s in self.steps],
            "inconclusive": self.inconclusive,
        }


@dataclass
class _Step:
    name: str
    command: list[str]
    note: str = ""
    proc: subprocess.Popen[bytes] | None = None
    out: IO[bytes] | None = None
    started: float = 0.0
    seconds: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    output: str = ""
    stopped: str = ""  # why it was killed after another step failed
    cpu_limit_s: float = float("inf")  # CPU seconds of the step's tree; the deadline is then the wall backstop
    host_stalled: bool = False  # the wall backstop ended it while it used less than its CPU seconds

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": list(self.command),
            "returncode": self.returncode,
            "seconds": round(self.seconds, 3),
            "timed_out": self.timed_out,
            "note": "; ".join(n for n in (self.note, self.stopped) if n),
        }


def _as_list(sources: str | Sequence[str] | None) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


def _module_def(functions: Sequence[str] | Mapping[str, str] | str | None, error_handling: bool) -> list[str]:
    """The pybind11 module load_inline appends to the C++ sources for ``functions``."""
    if functions is None:
        return []
    docs = (
        {functions: functions}
        if isinstance(functions, str)
        else (dict(functions) if isinstance(functions, Mapping) else {f: f for f in functions})
    )
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for name, doc in docs.items():
        fn = f"torch::wrap_pybind_function({name})" if error_handling else name
        lines.append(f'm.def("{name}", {fn}, "{doc}");')
    return [*lines, "}"]


def _torch_build_flags() -> tuple[list[str], list[str], str]:
    """(include paths, defines, -std flag) as torch's JIT loader would use them, without CUDA in torch."""
    try:
        from torch.utils import cpp_extension
    except ImportError as exc:
        raise BackendUnavailableError(f"cuda_compile_check needs torch (>= 2.4) importable; found: {exc}") from exc
    includes = list(cpp_extension.include_paths())  # CPU paths: the CUDA variant insists on CUDA_HOME
    py_include = sysconfig.get_path("include", scheme="posix_prefix")
    if py_include:
        includes.append(py_include)
    defines = [f"-DTORCH_EXTENSION_NAME={_EXTENSION_NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    with warnings.catch_warnings():  # torch 2.9+ deprecates these helpers; older torch needs their flags
        warnings.simplefilter("ignore")
        for helper in ("_get_pybind11_abi_build_flags", "_get_glibcxx_abi_build_flags"):
            flags: list[str] | None = getattr(cpp_extension, helper, lambda: [])()
            # Written for a shell (torch <= 2.8 quotes them as -DPYBIND11_COMPILER_TYPE=\\"_gcc\\"); no shell here.
            defines += [word for flag in flags or [] for word in shlex.split(flag)]
    if not any((Path(p) / "c10/cuda/impl/cuda_cmake_macros.h").exists() for p in includes):
        # A CPU build of torch ships c10/cuda headers without this generated file; torch's own escape
        # hatch (c10/cuda/CUDAMacros.h) skips it. It only sets Windows DLL export macros.
        defines.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    loader_text = Path(cpp_extension.__file__).read_text(encoding="utf-8", errors="ignore")
    std = "-std=c++20" if "-std=c++20" in loader_text else "-std=c++17"  # the standard this torch's loader uses
    return includes, defines, std


def _commands(
    has_cpp: bool,
    has_cuda: bool,
    cuda_home: Path,
    arch: str,
    extra_cuda_cflags: Sequence[str],
    extra_cflags: Sequence[str],
    extra_include_paths: Sequence[str],
) -> list[_Step]:
    includes, defines, std = _torch_build_flags()
    user = [f"-I{Path(p).resolve()}" for p in extra_include_paths]
    system = [f for p in [*includes, str(cuda_home / "include")] for f in ("-isystem", p)]
    steps: list[_Step] = []
    if has_cuda:
        from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

        dropped = [f for f in extra_cuda_cflags if _ARCH_FLAG.match(f)]
        kept = [f for f in extra_cuda_cflags if not _ARCH_FLAG.match(f)]
        cmd = [
            str(cuda_home / "bin" / "nvcc"),
            *user,
            *system,
            *defines,
            *COMMON_NVCC_FLAGS,
            "--compiler-options",
            "-fPIC",
            f"-arch={arch}",
            "-c",
            "-o",
            "cuda.o",
            *kept,
        ]
        if not any(f.startswith("-std=") for f in cmd):
            cmd.append(std)
        note = f"arch flags {dropped} replaced by -arch={arch} (one target suffices for a check)" if dropped else ""
        steps.append(_Step("cuda", [*cmd, "cuda.cu"], note))
    if has_cpp:
        from torch.utils.cpp_extension import get_cxx_compiler

        cxx = get_cxx_compiler()
        steps.append(
            _Step("cpp", [cxx, *user, *system, *defines, "-fPIC", std, *extra_cflags, "-c", "main.cpp", "-o", "main.o"])
        )
    return steps


def _start(step: _Step, build: Path) -> None:
    step.out = open(build / f"{step.name}.log", "wb")  # noqa: SIM115  (closed in _finish)
    step.started = time.monotonic()
    step.proc = subprocess.Popen(
        step.command,
        cwd=build,
        stdout=step.out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # own process group: nvcc's children (cicc, ptxas, gcc) die with it
        env={**os.environ, "LC_ALL": "C"},  # ASCII quotes in gcc's messages, whatever the user's locale
    )


def _over_cpu(step: _Step) -> bool:
    """True (and the step killed, as timed out) once its process tree used more than its CPU seconds."""
    from musaenv.isolation.limits import tree_cpu_seconds

    if (
        step.proc is None
        or step.cpu_limit_s == float("inf")
        or (tree_cpu_seconds(step.proc.pid) or 0.0) <= step.cpu_limit_s
    ):
        return False
    step.timed_out = True
    with contextlib.suppress(ProcessLookupError):
        os.killpg(step.proc.pid, signal.SIGKILL)
    return True


def _finish(step: _Step, build: Path, deadline: float) -> None:
    assert step.proc is not None and step.out is not None
    while step.proc.poll() is None and not step.timed_out:
        try:
            step.returncode = step.proc.wait(timeout=min(_POLL_S, max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if _over_cpu(step):
                break
            if time.monotonic() >= deadline:
                step.timed_out = True
                step.host_stalled = step.cpu_limit_s != float("inf")  # wall time only: the host's, not the step's
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(step.proc.pid, signal.SIGKILL)
    step.returncode = step.proc.wait() if not step.timed_out else None
    step.seconds = time.monotonic() - step.started
    step.out.close()
    step.output = (build / f"{step.name}.log").read_text(encoding="utf-8", errors="replace")
    if step.host_stalled:
        step.output += (f"\n[musaenv] {step.name} step killed at the {step.seconds:.0f} s wall-clock backstop using "
                        f"less than its {step.cpu_limit_s:.0f} CPU seconds: the host was too slow\n")  # fmt: skip
    elif step.timed_out:
        limit = f"{step.cpu_limit_s:.0f} CPU seconds" if step.cpu_limit_s != float("inf") else "its time limit"
        step.output += f"\n[musaenv] {step.name} step killed after {step.seconds:.1f} s (timeout: {limit})\n"
    elif step.stopped:
        step.output += f"\n[musaenv] {step.name} step {step.stopped} (its own verdict cannot change the outcome)\n"


def _stop_on_first_failure(steps: list[_Step], deadline: float) -> None:
    """Wait until every step ended or one failed; then the others are killed (their verdict cannot change it).

    A compile error is then as cheap as its own step: a kernel error does not wait the ~60 s of the C++ step.
    """
    next_cpu_check = time.monotonic() + _POLL_S
    while time.monotonic() < deadline:
        codes = [s.proc.poll() if s.proc is not None else 0 for s in steps]
        failed = [s for s, rc in zip(steps, codes) if rc not in (None, 0)]
        if not failed and time.monotonic() >= next_cpu_check:  # reading a tree's CPU seconds walks /proc
            failed = [s for s, rc in zip(steps, codes) if rc is None and _over_cpu(s)]
            next_cpu_check = time.monotonic() + _POLL_S
        if failed:
            for s, rc in zip(steps, codes):
                if rc is None and s.proc is not None and s not in failed:
                    s.stopped = f"stopped: the {failed[0].name} step failed first"
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(s.proc.pid, signal.SIGKILL)
            return
        if all(rc is not None for rc in codes):
            return
        time.sleep(0.05)


def _run(steps: list[_Step], build: Path, deadline: float) -> None:
    """Run all steps concurrently until done, one failed, or the deadline; no process group outlives this call."""
    try:
        for step in steps:
            try:
                _start(step, build)
            except OSError as exc:  # the compiler itself is missing: a harness problem, not the candidate's
                raise BackendUnavailableError(f"cannot run {step.command[0]!r}: {exc}") from exc
        if len(steps) > 1:
            _stop_on_first_failure(steps, deadline)
        for step in steps:
            _finish(step, build, deadline)
    finally:
        _kill(steps)


def _compose_log(steps: list[_Step], passed: set[str]) -> str:
    ordered = sorted(steps, key=lambda s: (s.name in passed, bool(s.stopped)))  # failing steps first, stopped next
    parts = []
    for s in ordered:
        status = "timed out" if s.timed_out else "stopped" if s.stopped else f"exit {s.returncode}"
        if s.name in passed and s.returncode != 0:  # the link: only symbols of libraries absent here were unresolved
            status += "; " + s.note
        parts.append(f"== {s.name}: {shlex.join(s.command[:1] + s.command[-1:])} ({status})\n{s.output}")
    return "\n".join(parts)


def _inconclusive(steps: list[_Step], cuda_home: Path, oom_during: bool = False) -> str | None:
    """Reason when every failure is a header missing from this machine's CUDA toolkit, the host stalled a step
    (its wall-clock backstop ran out while it used less than its CPU seconds), or the machine ended one
    (:func:`musaenv.toolchains.faults.confirmed_fault`: its exit status, or a kill it reports that the kernel's OOM-kill
    count confirms, ``oom_during``; never the output alone, which the candidate's source can write)."""
    stalled = [s.name for s in steps if s.host_stalled]
    if stalled:
        return f"the host was too slow: {stalled} ran past the wall-clock backstop within their CPU seconds"
    failed = [s for s in steps if s.returncode != 0 and not s.stopped]  # a stopped step did not fail by itself
    for s in failed:  # killed from outside, a full disk, no process could start: the machine's (build/faults.py)
        fault = None if s.timed_out else confirmed_fault(s.output, [s.record()], oom_during)
        if fault is not None:
            return f"{fault}; the candidate was not judged"
    missing: list[str] = []
    for s in failed:
        headers = [a or b for a, b in _MISSING_HEADER.findall(s.output)]
        if s.timed_out or not headers:
            return None
        missing += headers
    env = [h for h in missing if _ENV_HEADER.search(h) and not (cuda_home / "include" / h).exists()]
    if not failed or len(env) != len(missing):
        return None
    return f"this machine lacks {sorted(set(env))} (part of a full CUDA toolkit); the candidate was not checked"


# Over 60 lines with its docstring (the code is ~35): set up, run the steps, link, judge; each a call already.
# size: one sequence read top to bottom (toolkit, sources, commands, run, link, outcome); its steps are helpers.
def cuda_compile_check(
    cpp_sources: Sequence[str] | str,
    cuda_sources: Sequence[str] | str,
    functions: Sequence[str] | Mapping[str, str] | str | None,
    extra_cuda_cflags: Sequence[str] = (),
    extra_cflags: Sequence[str] = (),
    extra_include_paths: Sequence[str] = (),
    timeout_s: float = 300,
    arch: str = "sm_90",
    *,
    with_pytorch_error_handling: bool = True,
    extra_ldflags: Sequence[str] = (),
) -> CompileCheck:
    """Compile a ``load_inline`` candidate's sources without a GPU; a bad candidate is a failed check.

    Args:
        cpp_sources: ``cpp_sources`` as given to ``load_inline`` (a string or strings).
        cuda_sources: ``cuda_sources`` as given to ``load_inline``.
        functions: Names (or name -> docstring) to bind, as ``load_inline``'s ``functions``.
        extra_cuda_cflags: nvcc flags; ``-arch``/``-gencode`` flags are replaced by ``-arch={arch}``.
        extra_cflags: C++ compiler flags.
        extra_include_paths: Extra ``-I`` directories.
        timeout_s: CPU seconds each step's process tree may use (past it: killed, a timed-out failure); the whole
            check also has the wall-clock backstop :func:`musaenv.isolation.limits.backstop_s` of it (past it the
            check is ``inconclusive``, the host's fault).
        arch: The one GPU architecture nvcc compiles device code for.
        with_pytorch_error_handling: As ``load_inline``'s (wraps bound functions in ``wrap_pybind_function``).
        extra_ldflags: Linker flags, placed where torch places them; a ``-l`` of a CUDA library this machine lacks
            is dropped and its symbols accepted (:mod:`musaenv.toolchains.cuda.link`).

    Returns:
        ``ok`` (compiled, linked with every symbol resolved, module init defined), the compiler and linker output,
        wall time, the commands run, and ``inconclusive`` when only a header missing from this machine stopped it.

    Raises:
        BackendUnavailableError: No CUDA toolkit (``musaenv._env.cuda_home()``) or no torch.
    """
    cuda_home = _env.cuda_home()
    if cuda_home is None:
        raise BackendUnavailableError("no CUDA toolkit: set CUDA_HOME to a directory with bin/nvcc")
    cpp, cuda = _as_list(cpp_sources), _as_list(cuda_sources)
    module_def = _module_def(functions, with_pytorch_error_handling)
    from musaenv.isolation.limits import backstop_s

    started = time.monotonic()
    oom_before = oom_kill_count()
    deadline = started + backstop_s(timeout_s)  # the steps count CPU seconds (cpu_limit_s); this is the backstop
    build = Path(tempfile.mkdtemp(prefix="musaenv-cc-"))
    try:
        (build / "main.cpp").write_text("\n".join(["#include <torch/extension.h>", *cpp, *module_def]))
        if cuda:
            (build / "cuda.cu").write_text("\n".join([*_CUDA_PRELUDE, *cuda]))
        has_cpp = any(s.strip() for s in cpp) or bool(module_def)  # else main.cpp is one torch header: no symbols
        steps = _commands(has_cpp, bool(cuda), cuda_home, arch, extra_cuda_cflags, extra_cflags, extra_include_paths)
        for step in steps:
            step.cpu_limit_s = timeout_s
        _run(steps, build, deadline)
        passed = {s.name for s in steps if s.returncode == 0}
        if steps and len(passed) == len(steps):
            steps.append(_link(build, has_cpp, bool(cuda), cuda_home, extra_ldflags, deadline, passed))
    finally:
        shutil.rmtree(build, ignore_errors=True)
    seconds = time.monotonic() - started
    ok = bool(steps) and all(s.name in passed for s in steps)
    logger.debug("compile check %s in %.1f s: %s", "ok" if ok else "failed", seconds, [s.name for s in steps])
    return CompileCheck(
        ok=ok,
        log=_compose_log(steps, passed),
        seconds=round(seconds, 3),
        steps=tuple(s.record() for s in steps),
        inconclusive=None
        if ok
        else _inconclusive([s for s in steps if s.name not in passed], cuda_home, oom_rose(oom_before)),
    )


def _link(
    build: Path,
    has_cpp: bool,
    with_cuda: bool,
    cuda_home: Path,
    extra_ldflags: Sequence[str],
    deadline: float,
    passed: set[str],
) -> _Step:
    """Link the objects as torch would and judge the result; adds ``link`` to ``passed`` when the module would
    import (every symbol resolved or stubbed, ``PyInit_<name>`` defined)."""
    from torch.utils.cpp_extension import get_cxx_compiler

    objects = [*(["main.o"] if has_cpp else []), *(["cuda.o"] if with_cuda else [])]
    plan = link_plan(get_cxx_compiler(), objects, with_cuda, cuda_home, extra_ldflags, f"{_EXTENSION_NAME}.so")
    step = _Step("link", plan.command, "; ".join(plan.notes))
    _run([step], build, deadline)
    ok, missing = judge_link(step.returncode, step.output, plan)
    if missing:
        step.output += (
            f"\n[musaenv] undefined symbols (importing the module would fail with 'undefined symbol'): {missing}\n"
        )
    if ok and missing_module_init([build / o for o in objects], _EXTENSION_NAME):
        ok = False
        step.output += (
            f"\n[musaenv] the module defines no PyInit_{_EXTENSION_NAME}: no functions are bound and no "
            "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) is defined, so importing it fails ('dynamic module does not "
            "define module export function')\n"
        )
    if ok:
        passed.add("link")
    return step


def _kill(steps: list[_Step]) -> None:
    """Stop every step still running (its whole process group) and close its output."""
    for step in steps:
        if step.proc is not None and step.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(step.proc.pid, signal.SIGKILL)
            step.proc.wait()
        if step.out is not None and not step.out.closed:
            step.out.close()
