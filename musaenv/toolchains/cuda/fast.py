"""Fast builds of CUDA ``load_inline`` candidates: device code without torch's headers, host code like C++.

``load_inline`` hands ``cuda.cu`` (torch's headers, then the candidate's kernels and launchers) to nvcc, which spends
~30 s of the 2-core CI machine on torch's headers before any kernel code, and compiles ``main.cpp`` (all of
``torch/extension.h`` and the pybind11 module) beside it. Here the CUDA source is split
(:mod:`musaenv.toolchains.cuda.split`) and built in three parts that run at the same time:

* ``device``: nvcc on the kernels and their launch shims, no torch header (torch's nvcc flags and defines, the
  candidate's nvcc flags; one ``-arch`` for a compile-only check, torch's architecture list for a real build).
* ``host``: g++ on the launchers (torch's compile flags for the candidate, a precompiled ``torch/types.h``, the
  macros of torch's and the candidate's nvcc flags), kernel launches going through the shims.
* ``main``: the candidate's ``cpp_sources`` and binding through the C++ fast path
  (:func:`musaenv.toolchains.cpp.fastbuild.fast_build`), whose link takes the two objects above and CUDA's libraries.

A compile-only check links as :mod:`musaenv.toolchains.cuda.link` does (every symbol resolved, libraries absent here
stubbed); a real build links against torch's CUDA libraries and ``cudart`` like ``load_inline``. A device compile
that fails stops the other two at once (:mod:`musaenv.toolchains.cuda.parts`); its error is the verdict when it is
the candidate's own (:func:`device_verdict`); a source the split cannot place, and any other
failure, returns ``None``, and the caller builds the source as written (the full check, or ``load_inline``), whose
output is then the verdict. Measured costs: ``docs/scaling.md``.

Size: the fast build and the device-error rule it applies in one module (~365 lines since the steps in flight moved
to cuda_parts.py); the rule (device_verdict and its nvcc patterns) moves beside cuda_names.py with the CUDA subfolder.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv import _env
from musaenv.isolation.limits import backstop_s
from musaenv.toolchains.cpp.compiler import CompileFlags, torch_flags
from musaenv.toolchains.cpp.fastbuild import fast_build, isa_pragma_safe, linking_with, split_overlay
from musaenv.toolchains.cpp.pch import PchStore
from musaenv.toolchains.cuda.compile import _ARCH_FLAG, _CUDA_PRELUDE, _kill, _run, _start, _Step, _torch_build_flags
from musaenv.toolchains.cuda.link import judge_link, link_plan
from musaenv.toolchains.cuda.names import TorchNames, looked_up, torch_includes, torch_names
from musaenv.toolchains.cuda.parts import Abandon, DeviceWatch, Verdict, await_parts, start_in
from musaenv.toolchains.cuda.split import (
    DEVICE_FILE,
    DEVICE_ORIGIN,
    DEVICE_PRELUDE,
    CudaSplit,
    _blank,
    flags_allow_split,
    split_cuda,
)
from musaenv.toolchains.stopping import StopScope, stoppable
from musaenv.types import declined as decline

__all__ = ["CudaFastResult", "cuda_fast_build"]

log = logging.getLogger(__name__)

_MACRO_FLAG = re.compile(r"^-[DUI].")
_WORD = re.compile(r"[A-Za-z_]\w*")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:.*\\\n)*.*)$", re.M)
_DIRECTIVE_LINE = re.compile(r"^[ \t]*#(?:.*\\\n)*.*$", re.M)


@dataclass
class CudaFastResult:
    """A CUDA candidate that built through the split.

    Attributes:
        seconds: Wall time of the whole build.
        kernels: The kernels launched through shims.
        tier: The C++ fast path's tier that built ``main.cpp`` (``split`` or ``pch``).
        steps: What ran, with exit codes and seconds.
        ok: False when the device unit's errors are the verdict (``log``: the compiler's output).
        log: That verdict's log.
        wanted: What the build went without (``split`` header, ``bind`` objects), for a background build.
        retire: Headers the compiler refused for an empty unit, for the parent to retire.
    """

    seconds: float
    kernels: tuple[str, ...]
    tier: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    ok: bool = True
    log: str = ""
    wanted: list[str] = field(default_factory=list)
    retire: list[str] = field(default_factory=list)


_NVCC_ERROR = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$", re.M)
# nvcc's context line of an error inside a template kernel that a shim's explicit instantiation instantiated.
_SHIM_INSTANCE = re.compile(rf'instantiation of "[^\n]*?" at line \d+ of {re.escape(DEVICE_FILE)}')
# A redeclaration whose first declaration is in the same file (no "of <file>"): the candidate's own when its line is.
_OWN_REDECLARATION = re.compile(
    r'declaration is incompatible with previous "[^"\n]*" \(declared at line (?P<line>\d+)\)$'
)
# What nvcc says when a declaration is missing, which a header only the unsplit unit includes could explain.
_NVCC_LOOKUP = re.compile(
    r"undefined|not a member|has no member|no instance of|incomplete|not a template|not a (type|class|namespace)"
    r"|explicit type is missing|no suitable|ambiguous|cannot open|no operator|declared|not allowed|qualifier|overload"
)


def device_verdict(output: str, prelude_lines: int, names: Callable[[], TorchNames | None], code: str) -> str | None:
    """nvcc's output on the device unit as the candidate's verdict, or ``None`` when the unsplit check must decide.

    The unsplit unit has the same candidate lines below torch's headers, compiled with the same flags, and those
    headers can only add declarations and macros. So the device unit's errors are the verdict when every one is in
    the candidate's own lines of ``cuda.cu`` (the device unit carries ``#line`` marks,
    :mod:`musaenv.toolchains.cuda.split`) and the headers could explain none (``names()``: what they spell,
    :mod:`musaenv.toolchains.cuda.names`, asked only then): ``code``, the device unit, spells no macro they define
    differently, and each error is either no lookup at all, or a lookup of a name they never spell (nor the
    candidate's host code: ``names`` has its words too), or a member-only operator on built-in or CUDA vector types.
    Anything else (a missing name a header could declare, a lookup nvcc does not name, another shape of error) is
    left to the unsplit check. An error in a template kernel seen through its shim's explicit instantiations counts
    too: the shims instantiate exactly the template arguments the unsplit unit's launches do, or there is no split
    (:mod:`musaenv.toolchains.cuda.templates`).
    """
    errors = list(_NVCC_ERROR.finditer(output))
    rest = re.sub(r"errors? detected in the compilation of \"[^\"\n]*\"", "", _NVCC_ERROR.sub("", output))
    if not errors or "error" in rest:
        return None  # an error nvcc reports in another shape (a fatal one, the host compiler's): not ours to judge
    if DEVICE_FILE in _SHIM_INSTANCE.sub("", rest):
        return None  # musaenv's lines took part other than by instantiating a template kernel: not judged here
    wanted: list[str] = []
    for i, e in enumerate(errors):
        if e["file"] != DEVICE_ORIGIN or int(e["line"]) <= prelude_lines:
            return None
        prev = _OWN_REDECLARATION.match(e["msg"])
        if prev and int(prev["line"]) > prelude_lines:
            continue  # both declarations are the candidate's lines (a template's extern __shared__ per type)
        if _NVCC_LOOKUP.search(e["msg"]):
            name = looked_up(e["msg"], output[e.end() : errors[i + 1].start() if i + 1 < len(errors) else None])
            if name is None:
                return None
            wanted += [name] if name else []
    known = names()
    if known is None or _spelled(code) & known.macros or set(wanted) & known.tokens:
        return None
    return output.replace(f'compilation of "{DEVICE_FILE}"', f'compilation of "{DEVICE_ORIGIN}"')


def _spelled(code: str) -> set[str]:
    """The identifiers ``code``'s lines use, the body of a macro it defines counting only where it is used (a
    ``CHECK_CUDA`` spelling ``TORCH_CHECK`` that no kernel expands changes nothing)."""
    text = _blank(code) or code
    defs = {m[1]: set(_WORD.findall(m[2])) for m in _DEFINE.finditer(text)}
    used = set(_WORD.findall(_DIRECTIVE_LINE.sub("", text)))
    todo = list(used & defs.keys())
    while todo:
        body = defs.pop(todo.pop(), set())
        used |= body
        todo += list(body & defs.keys())
    return used


def _names_of(
    spec: dict[str, Any], step: _Step, split: CudaSplit, cache: Path, tmp: Path, deadline: float
) -> Callable[[], TorchNames | None]:
    """What the unsplit unit's headers and the candidate's host code spell, for :func:`device_verdict`."""

    def names() -> TorchNames | None:
        includes = torch_includes("\n".join(spec.get("cuda_sources") or ()))
        if includes is None:
            return None
        cmd = step.command
        out = cmd.index("-o")
        flags = [f for f in [*cmd[1:out], *cmd[out + 2 : -1]] if f != "-c"]  # the device step's, minus its files
        known = torch_names(cache, cmd[0], flags, _CUDA_PRELUDE, includes, DEVICE_PRELUDE, tmp, deadline)
        if known is None:
            return None
        host = set(_WORD.findall(_blank(split.host) or split.host))
        return TorchNames(known.tokens | host, known.macros)

    return names


def _device_step(spec: dict[str, Any], cuda_home: Path, arch_flags: Sequence[str] | None) -> _Step:
    """nvcc on the device part: torch's includes, defines and nvcc flags, the candidate's nvcc flags."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    includes, defines, std = _torch_build_flags()
    user = [f"-I{Path(p).resolve()}" for p in spec.get("extra_include_paths") or ()]
    system = [f for p in [*includes, str(cuda_home / "include")] for f in ("-isystem", p)]
    flags = list(spec.get("extra_cuda_cflags") or ())
    if arch_flags is None:  # compile-only: one architecture, as the full check uses
        flags, arch = [f for f in flags if not _ARCH_FLAG.match(f)], ["-arch=sm_90"]
    else:
        arch = list(arch_flags)
    cmd = [str(cuda_home / "bin" / "nvcc"), *user, *system, *defines, *COMMON_NVCC_FLAGS, "--compiler-options",
           "-fPIC", *arch, "-c", "-o", "musaenv_device.o", *flags]  # fmt: skip
    if not any(f.startswith("-std=") for f in cmd):
        cmd.append(std)
    return _Step("device", [*cmd, "musaenv_device.cu"])


def _host_step(spec: dict[str, Any], flags: CompileFlags, pch: list[str], cache: Path, cuda_home: Path) -> _Step:
    """g++ on the host part, with the macros nvcc would have defined for it (torch's and the candidate's)."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    _, defines, _ = _torch_build_flags()
    macros = [f for f in [*COMMON_NVCC_FLAGS, *(spec.get("extra_cuda_cflags") or ())] if _MACRO_FLAG.match(f)]
    macros += [d for d in defines if d.startswith("-DC10_CUDA")]  # the CPU wheel's c10/cuda switch, when needed
    cmd = [*flags.cxx, *flags.cflags, "-I", str(split_overlay(cache)), *pch, "-isystem", str(cuda_home / "include"),
           *macros, "-c", "musaenv_host.cpp", "-o", "musaenv_host.o"]  # fmt: skip
    return _Step("host", cmd)


def _compile_only_linker(
    watch: DeviceWatch, host: _Step, tmp: Path, flags: CompileFlags, spec: dict[str, Any], cuda_home: Path,
    deadline: float, steps: list[dict[str, Any]],
) -> Any:  # fmt: skip
    def link(objs: list[Path], out: Path) -> tuple[int, str]:
        await_parts(watch, host, tmp, deadline, steps)
        objects = [str(o) for o in objs] + ["musaenv_host.o", "musaenv_device.o"]
        plan = link_plan(flags.cxx[0], objects, True, cuda_home, spec.get("extra_ldflags") or (), str(out))
        step = _Step("link", plan.command, "; ".join(plan.notes), cpu_limit_s=host.cpu_limit_s)
        _run([step], tmp, deadline)
        ok, _ = judge_link(step.returncode, step.output, plan)
        steps.append(step.record())
        if not ok:
            raise Abandon(f"link: {step.output[-400:]}")
        return 0, step.output

    return link


def _real_linker(
    watch: DeviceWatch, host: _Step, tmp: Path, flags: CompileFlags, cuda_home: Path, deadline: float,
    steps: list[dict[str, Any]],
) -> Any:  # fmt: skip
    from torch.utils.cpp_extension import TORCH_LIB_PATH

    cuda_lib = cuda_home / "lib64" if (cuda_home / "lib64").exists() else cuda_home / "lib"

    def link(objs: list[Path], out: Path) -> tuple[int, str]:
        await_parts(watch, host, tmp, deadline, steps)
        cuda_libs = [f"-L{TORCH_LIB_PATH}", "-lc10_cuda", "-ltorch_cuda", f"-L{cuda_lib}", "-lcudart"]
        cmd = [*flags.cxx, *map(str, objs), "musaenv_host.o", "musaenv_device.o", *flags.ldflags, *cuda_libs]
        cmd += ["-o", str(out)]
        step = _Step("link", cmd, cpu_limit_s=host.cpu_limit_s)
        _run([step], tmp, deadline)
        steps.append(step.record())
        if step.returncode != 0:
            raise Abandon(f"link: {step.output[-400:]}")
        return 0, step.output

    return link


def cuda_fast_build(
    spec: dict[str, Any],
    name: str,
    tmp: Path,
    cache: Path,
    *,
    arch_flags: Sequence[str] | None = None,
    declined: list[dict[str, str]] | None = None,
) -> CudaFastResult | None:
    """Build a CUDA spec through the split; ``None`` means "build it as written" (never a verdict by itself).

    Args:
        spec: A :class:`~musaenv.toolchains.buildspec.BuildSpec` as a dict (``timeout_s``: CPU seconds of each step's
            process tree; a wall-clock backstop of :func:`~musaenv.isolation.limits.backstop_s` bounds them all).
        name: Module name (``TORCH_EXTENSION_NAME``); a real build writes ``tmp/<name>.so``.
        tmp: Private build directory.
        cache: The ``pch`` cache directory (precompiled headers and binding objects, shared with C++ builds).
        arch_flags: nvcc architecture flags of a real build (torch's list); ``None`` for a compile-only check
            (one architecture, the link resolved against the libraries present here).
        declined: Where to say why the split did not build it, when this returns ``None``.
    """
    declined = [] if declined is None else declined
    cuda_home = _env.cuda_home()
    split = split_cuda("\n".join(spec.get("cuda_sources") or ()), _CUDA_PRELUDE)
    why = split_unfit(spec, cuda_home is not None, split is not None)
    if why is not None or cuda_home is None or split is None:
        declined.append(decline("cuda_split", why or "not splittable"))
        return None
    started = time.monotonic()
    # Each step is limited in CPU seconds of its own tree (a busy host does not inflate them); the wall clock is only
    # the backstop. Past either the split is abandoned and the source built as written, never a verdict by itself.
    deadline = started + backstop_s(float(spec.get("timeout_s") or 300))
    try:
        flags = torch_flags(cache, name, spec.get("extra_cflags") or (), spec.get("extra_ldflags") or (),
                            spec.get("extra_include_paths") or ())  # fmt: skip
        res = _build(spec, name, tmp, cache, split, flags, cuda_home, arch_flags, started, deadline)
        if res is not None:
            return res
        why = "the host part did not build through the fast driver: built as written, whose errors decide"
    except Verdict as v:  # diagnosed once: the device unit's errors are the candidate's own
        status = f"exit {v.step.returncode}"
        head = f"== cuda: {shlex.join([v.step.command[0], DEVICE_ORIGIN])} ({status})\n" if arch_flags is None else (
            f"RuntimeError: Error building extension '{name}': FAILED: cuda.cuda.o\n"
        )  # fmt: skip
        return CudaFastResult(round(time.monotonic() - started, 3), (), "", [v.step.record()], False, head + v.output)
    except Abandon as e:
        log.info("CUDA split build of %s abandoned, building it as written: %s", name, str(e)[-300:])
        why = f"the split build was abandoned ({str(e)[-160:]})"
    except (RuntimeError, ValueError, OSError, ImportError, AttributeError, TypeError) as e:
        log.warning("CUDA split build unavailable, building as written: %s", e)
        why = f"the split build is unavailable ({type(e).__name__}: {str(e)[:160]})"
    declined.append(decline("cuda_split", why or "the split build did not produce the module: built as written"))
    return None


def split_unfit(spec: dict[str, Any], toolkit: bool, splittable: bool) -> str | None:
    """Why the CUDA split cannot take ``spec`` (``toolkit``: a CUDA toolkit was found; ``splittable``: its device
    and host parts could be told apart); ``None`` when it can."""
    if not toolkit:
        return "no CUDA toolkit found (CUDA_HOME): the split drives nvcc itself"
    if not spec.get("functions") or not spec.get("cpp_sources"):
        return "no cpp_sources with functions= to bind: the split binds named functions only"
    if not flags_allow_split(list(spec.get("extra_cuda_cflags") or ())):
        return "extra_cuda_cflags that change how units link or warn (relocatable device code, -Werror)"
    if not splittable:
        return "the .cu source could not be split into device and host parts"
    return None


def _build(
    spec: dict[str, Any], name: str, tmp: Path, cache: Path, split: CudaSplit, flags: CompileFlags, cuda_home: Path,
    arch_flags: Sequence[str] | None, started: float, deadline: float,
) -> CudaFastResult | None:  # fmt: skip
    (tmp / "musaenv_device.cu").write_text(split.device)
    (tmp / "musaenv_host.cpp").write_text(split.host)
    steps: list[dict[str, Any]] = []
    device = _device_step(spec, cuda_home, arch_flags)
    device.cpu_limit_s = float(spec.get("timeout_s") or 300)
    names = _names_of(spec, device, split, cache, tmp, deadline)
    judge = lambda output: device_verdict(output, len(_CUDA_PRELUDE), names, split.device)  # noqa: E731
    scope, parts = StopScope(), [device]
    _start(device, tmp)  # nvcc runs while the precompiled header is looked up; a failure stops the host side
    watch = DeviceWatch(device, tmp, deadline, scope, judge)
    try:
        store = PchStore(cache, deadline=deadline, isa_by_pragma=isa_pragma_safe(split.host))
        pch = store.include_flags("split", flags) or []
        parts.append(_host_step(spec, store.unit_flags("split", flags) if pch else flags, pch, cache, cuda_home))
        parts[1].cpu_limit_s = device.cpu_limit_s
        start_in(scope, parts[1], tmp)
        linker = (
            _compile_only_linker(watch, parts[1], tmp, flags, spec, cuda_home, deadline, steps)
            if arch_flags is None
            else _real_linker(watch, parts[1], tmp, flags, cuda_home, deadline, steps)
        )
        cpp_spec = {**spec, "cuda_sources": [], "with_cuda": None}
        with linking_with(linker), stoppable(scope):
            res = fast_build(cpp_spec, name, tmp, cache, "fast")
        if res is None or not res.ok:  # main.cpp did not build here (or was stopped): the kernels' errors decide
            watch.verdict(steps)
        if pch and parts[1].output:
            store.check_used("split", flags, parts[1].output)
    finally:
        watch.close()
        _kill(parts)
    if res is None or not res.ok:
        return None
    steps += [{"name": f"main:{s.get('step')}", "returncode": s.get("rc")} for s in res.steps]
    wanted = list(dict.fromkeys([*store.wanted, *res.wanted]))
    retire = list(dict.fromkeys([*store.refused, *res.retire]))
    return CudaFastResult(round(time.monotonic() - started, 3), split.kernels, res.tier, steps, wanted=wanted,
                          retire=retire)  # fmt: skip
