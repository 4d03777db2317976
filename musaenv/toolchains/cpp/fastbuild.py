"""Fast builds of CPU C++ candidates: torch's sources and flags, our own compiler driving.

The produced module is what ``load_inline(name, cpp_sources, functions=...)`` produces: the same ``main.cpp``
text, torch's own compile and link flags (read from torch, see :mod:`musaenv.toolchains.cpp.compiler`), the candidate's
flags untouched, ``TORCH_EXTENSION_NAME`` set to the module name, every function bound with
``m.def(name, torch::wrap_pybind_function(fn), doc)`` in the order given. Two tiers, tried in order:

``split``
    The candidate's code is compiled *without* pybind11: a directory earlier on the include path maps
    ``torch/extension.h`` to ``torch/types.h`` (ATen, ``torch::Tensor`` and the torch factory functions, with a
    precompiled ``torch/types.h`` when one is ready for these flags, :mod:`musaenv.toolchains.cpp.flagkeys`). The
    binding goes in other translation units (:mod:`musaenv.toolchains.cpp.bindobj`): one object per function
    *signature* (read back from a symbol whose mangled name spells ``decltype(&fn)``) and one generic
    ``PYBIND11_MODULE`` object whose ``PyInit_`` symbol is renamed to the module's name. Only for sources that
    never mention Python or pybind11. A compile error here is the verdict unless it can be an artefact of the
    narrower header (a name, member, type or overload not found that a header only ``torch/extension.h``
    brings mentions: :func:`_final_error`); then, and for anything else unexpected, the next tier decides.
``pch``
    Torch's exact ``main.cpp`` compiled with a precompiled ``torch/extension.h`` when one is ready (else with the
    header itself, as ``load_inline`` compiles it). Its compiler errors are the verdict (same source, same flags,
    same file name as ``load_inline`` would report).

No build waits for a precompiled header: a missing one is compiled without and named in ``FastResult.wanted``,
which the parent builds in the background (:mod:`musaenv.toolchains.warmup`). The candidate's compiles may write
only their private directory (a Landlock layer on each compiler process, :func:`_writes_only`): the header and
binding store is written by our own compiles of our own sources alone.

Callers fall back to torch's ``load_inline`` when neither tier can run (e.g. a torch whose flag helpers changed).

Why our own driver rather than a build tool: ``load_inline`` (ninja under it) compiles the candidate's code and
its pybind11 binding in one translation unit with all of ``torch/extension.h`` every time, and its ``use_pch`` keeps
one header in site-packages (see :mod:`.pch`); ccache keys on the whole preprocessed unit, so a new
candidate never hits. The savings here come from choosing the translation units (the binding apart, shared per
signature; a precompiled header per flag set in the cache), which no build tool decides for us. The compiler and
its flags stay torch's.

Size: the split tier's one build path (unit, binding objects, signatures, link); it moves into a C++ toolchain
folder with issue 30 step 3.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.toolchains.cpp.bindobj import binding_objects, module_object, sig_id
from musaenv.toolchains.cpp.compiler import CompileFlags, run_tool, torch_flags, unique_suffix
from musaenv.toolchains.cpp.flagkeys import strip_refusals
from musaenv.toolchains.cpp.header_names import extension_only_names, names_in_quotes
from musaenv.toolchains.cpp.pch import PchStore
from musaenv.toolchains.own_checks import out_of_space
from musaenv.types import declined as decline

__all__ = ["FastResult", "fast_build", "isa_pragma_safe", "linking_with", "split_overlay"]

log = logging.getLogger(__name__)

# Sources that may need Python or pybind11 declarations keep the full torch/extension.h (tier ``pch``).
_NEEDS_PYTHON = re.compile(
    r"pybind11|PYBIND11|\bpy::|Python\.h|torch/python\.h|\bPy[A-Z_]\w*|\b_object\b|\bTHP\w*|torch::python"
    r"|wrap_pybind_function|HANDLE_TH_ERRORS"
)
_IDENT = re.compile(r"^[A-Za-z_]\w*(::[A-Za-z_]\w*)*$")
# What makes a unit's instruction-set extensions by pragma (pch.PchStore.isa_shared) differ from the same flags on
# its command line: the source resets or multiversions the target, or (in the log) a function GCC made itself
# (the initialiser of a namespace-scope variable) kept the header's target and could not inline an intrinsic.
_ISA_UNSAFE = re.compile(r"reset_options|target_clones|target\s*\(\s*\"default\"")
_ISA_ARTEFACT = re.compile(r"target specific option mismatch|without AVX\w* enabled changes the ABI")
_SIG_SYMBOL = re.compile(r"^void musaenv_sig_<(\d+), (.+)>\(\)$")
_TYPE_WORD = re.compile(r"[A-Za-z_][\w:]*")
_BUILTIN_WORDS = {"long", "int", "short", "char", "bool", "double", "float", "void", "unsigned", "signed", "const",
                  "volatile", "noexcept", "wchar_t", "char8_t", "char16_t", "char32_t"}  # fmt: skip
_KNOWN_NAMESPACES = ("at::", "c10::", "std::", "torch::", "caffe2::")
_KEYWORDS = {"class", "struct", "union", "enum", "template", "typename", "operator", "auto", "this", "namespace"}
_ERROR_LINE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$", re.MULTILINE)
# What a declaration missing from torch/types.h (but in torch/extension.h) can make GCC say. Not "has no member
# named": members are in the class definition, which is complete wherever a member is used.
_LOOKUP_ERROR = re.compile(
    r"not declared|not a member|does not name|has not been declared|incomplete type|no matching"
    r"|is not a (class|namespace|template|type)|undeclared|there are no arguments|not a template|ambiguous"
    r"|no type named|forward declaration|could not convert|cannot convert|invalid use of|nested-name-specifier"
    r"|expected (unqualified-id|type-specifier|template-name|class-name|namespace-name|nested-name|primary-expression"
    r" before '[<>(]|'[;,)]' before '[<>]|initializer before '[<]')"
)


@dataclass
class FastResult:
    """Outcome of :func:`fast_build`.

    Attributes:
        ok: The module ``<tmp>/<name>.so`` was produced.
        log: Compiler output (for failures: the verdict, formatted like torch's build errors).
        tier: ``split`` or ``pch`` (the tier that decided).
        steps: What was tried, with seconds, for benchmarks and logs.
        wanted: Precompiled headers (``split``/``full``) that were missing for these flags, for the parent to
            build in the background.
        retire: Header directories the compiler refused for an empty unit with these flags, for the parent to
            retire (:func:`musaenv.toolchains.cpp.pch.retire_headers`).
        declined: Faster paths that did not apply and why (:func:`musaenv.types.declined`), in the order tried.
    """

    ok: bool
    log: str
    tier: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    wanted: list[str] = field(default_factory=list)
    retire: list[str] = field(default_factory=list)
    declined: list[dict[str, str]] = field(default_factory=list)


def _main_cpp(spec: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """torch's ``main.cpp`` (without the binding block) and the (function, docstring) pairs to bind."""
    fns = spec.get("functions")
    if isinstance(fns, str):
        fns = [fns]
    pairs = list(fns.items()) if isinstance(fns, dict) else [(f, f) for f in (fns or [])]
    return "\n".join(["#include <torch/extension.h>", *spec["cpp_sources"]]), pairs


def _binding_block(pairs: list[tuple[str, str]]) -> str:
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    lines += [f'm.def("{f}", torch::wrap_pybind_function({f}), "{doc}");' for f, doc in pairs]
    return "\n".join([*lines, "}"])


def _writes_only(tmp: Path) -> Callable[[], None]:
    """A ``preexec_fn`` stacking a Landlock layer on a compiler process: it may write ``tmp`` (and
    ``/dev/null``) only, not the shared store the builder itself may write. Without Landlock it changes
    nothing (the build sandbox still holds)."""
    from musaenv.isolation.ctypes_guard import PyGuard  # imported before the fork: no import lock in the child

    paths = [str(tmp), "/dev/null"]

    def apply() -> None:
        with contextlib.suppress(OSError):  # without it the builder's own sandbox still confines the compiler
            PyGuard.restrict_writes(paths)

    return apply


def _compile(flags: CompileFlags, extra: list[str], src: Path, obj: Path, tmp: Path) -> tuple[int, str, list[str]]:
    cmd = [*flags.cxx, *flags.cflags, *extra, "-c", str(src), "-o", str(obj)]
    rc, out = run_tool(cmd, tmp, preexec=_writes_only(tmp), tmpdir=tmp)
    return rc, out, cmd


Linker = Callable[[list[Path], Path], tuple[int, str]]
_LINKER: contextvars.ContextVar[Linker | None] = contextvars.ContextVar("musaenv_fast_linker", default=None)


@contextlib.contextmanager
def linking_with(linker: Linker) -> Iterator[None]:
    """Within this block, :func:`fast_build` links ``(objects, output)`` with ``linker`` (returning ``(exit code,
    output)``) instead of torch's link rule: the CUDA fast build adds its own objects and CUDA's libraries."""
    token = _LINKER.set(linker)
    try:
        yield
    finally:
        _LINKER.reset(token)


@functools.lru_cache(maxsize=1)
def _gold() -> list[str]:
    """``-fuse-ld=gold`` where binutils has it: it links a module against torch's libraries in ~0.1 s against
    ld.bfd's ~0.2 s, a few percent of a cached-flags build (measured here: 2.7 s against 2.8 s of CPU)."""
    return ["-fuse-ld=gold"] if sys.platform.startswith("linux") and shutil.which("ld.gold") else []


def _link(flags: CompileFlags, objs: list[Path], out: Path, tmp: Path) -> tuple[int, str]:
    linker = _LINKER.get()
    if linker is not None:
        return linker(objs, out)
    rest = [*[str(o) for o in objs], *flags.ldflags, "-o", str(out)]
    gold = [] if any(f.startswith("-fuse-ld") for f in flags.ldflags) else _gold()
    if gold:
        rc, text = run_tool([*flags.cxx, *gold, *rest], tmp, preexec=_writes_only(tmp), tmpdir=tmp)
        if rc == 0:
            return rc, text
        log.info("gold could not link %s, linking with the default linker: %s", out.name, text[-300:])
    return run_tool([*flags.cxx, *rest], tmp, preexec=_writes_only(tmp), tmpdir=tmp)


def _error_log(name: str, cmd: list[str], out: str) -> str:
    """A build failure in the shape torch reports it (the compiler's own lines verbatim)."""
    return f"RuntimeError: Error building extension '{name}': FAILED: main.o\n{' '.join(cmd)}\n{strip_refusals(out)}"


def fast_build(
    spec: dict[str, Any], name: str, tmp: Path, cache: Path, mode: str = "fast",
    declined: list[dict[str, str]] | None = None,
) -> FastResult | None:  # fmt: skip
    """Build ``spec`` into ``tmp/<name>.so`` without torch's ``load_inline``; ``None`` means "use load_inline".

    Args:
        spec: A :class:`~musaenv.toolchains.loader.BuildSpec` as a dict.
        name: Module name (``TORCH_EXTENSION_NAME``).
        tmp: Private build directory.
        cache: The ``pch`` cache directory.
        mode: ``fast`` (split, then pch) or ``pch`` (pch only).
        declined: Where to say why neither tier could run, when this returns ``None`` (a result carries its own).
    """
    why = _unfit(spec)
    if why is None:
        try:
            flags = torch_flags(
                cache, name, spec.get("extra_cflags") or (), spec.get("extra_ldflags") or (),
                spec.get("extra_include_paths") or (),
            )  # fmt: skip
        except (RuntimeError, ValueError, OSError, ImportError, AttributeError, TypeError) as e:
            log.warning("fast build unavailable, using load_inline: %s", e)
            why = f"torch's compile flags could not be read for the fast driver ({type(e).__name__}: {str(e)[:160]})"
    if why is not None:
        if declined is not None:
            declined += [decline(t, why) for t in ("split", "pch")[mode == "pch" :]]
        return None
    source, pairs = _main_cpp(spec)
    store = PchStore(cache, isa_by_pragma=isa_pragma_safe(source))
    store.sweep()
    res = first = _tiers(flags, store, source, pairs, name, tmp, cache, mode, spec)
    if not res.ok and _BY_PRAGMA in res.steps and _ISA_ARTEFACT.search(res.log):
        # the pragma's doing, not the candidate's: the real flags on the command line decide (without a header)
        log.info("%s: extensions by pragma failed where the command line may not; building with the flags", name)
        again = PchStore(cache, isa_by_pragma=False)
        res = _tiers(flags, again, source, pairs, name, tmp, cache, mode, spec)
        store.wanted += again.wanted
        store.refused += again.refused
        res.declined = [*first.declined, *res.declined]
    res.wanted = list(dict.fromkeys(store.wanted))
    res.retire = list(dict.fromkeys(store.refused))
    res.declined = [dict(t) for t in dict.fromkeys(tuple(d.items()) for d in res.declined)]  # once each
    return res


def _unfit(spec: dict[str, Any]) -> str | None:
    """Why the fast driver (both its tiers) cannot take ``spec``; ``None`` when it can."""
    if spec.get("cuda_sources"):
        return "cuda sources: the fast driver compiles C++ only"
    if spec.get("with_cuda"):
        return "with_cuda=True: the fast driver links no CUDA libraries"
    if not spec.get("cpp_sources"):
        return "no cpp_sources: the fast driver compiles torch's main.cpp from them"
    return None


_BY_PRAGMA = {"step": "isa_by_pragma"}


def isa_pragma_safe(source: str) -> bool:
    """Whether a unit of ``source`` may take its instruction-set extensions by ``#pragma GCC target`` after its
    header (it neither resets the target options nor multiversions functions, whose ``default`` is the command
    line's target)."""
    return _ISA_UNSAFE.search(source) is None


def _tiers(
    flags: CompileFlags, store: PchStore, source: str, pairs: list[tuple[str, str]], name: str, tmp: Path,
    cache: Path, mode: str, spec: dict[str, Any],
) -> FastResult:  # fmt: skip
    steps: list[dict[str, Any]] = []
    found: list[dict[str, str]] = []
    res: FastResult | str = _split_unfit(source, pairs) if mode == "fast" else _PCH_MODE
    if res == "":
        # A fresh install's first build too: its binding objects compile on a thread beside the candidate's unit
        # (measured on 2 cores: 22.5 s wall and 32.8 s CPU against plain load_inline's 32 s and 34 s, and no
        # ~40 s of CPU in the background afterwards, which compiling torch's main.cpp here would leave).
        try:
            res = _split_tier(flags, store, source, pairs, name, tmp, cache, steps, found)
        except OSError as e:  # e.g. binutils (nm, c++filt, objcopy) missing: the pch tier needs none of them
            log.warning("split build unavailable: %s", e)
            res = f"the split tier's tools are unavailable ({e})"
    if isinstance(res, str):
        found.append(decline("split", res))
        res = _pch_tier(flags, store, source, pairs, name, tmp, steps, found)
    res.declined = found
    return res


def _split_unfit(source: str, pairs: list[tuple[str, str]]) -> str:
    """Why the split tier cannot take this source (it binds plain functions and compiles without pybind11);
    empty when it can."""
    if not pairs:
        return "no functions= to bind: the split tier binds named functions only"
    python = _NEEDS_PYTHON.search(source)
    if python:
        return f"the source uses Python or pybind11 ({python.group(0)!r}): the split tier compiles without them"
    if not all(_IDENT.match(f) for f, _ in pairs):
        return "a function name that is not a plain C++ name: the split tier binds by name"
    if any(re.search(r'["\\\n]', doc) for _, doc in pairs):
        return "a function docstring with quotes, backslashes or newlines: the split tier spells them in C++"
    return ""


def _pch_tier(
    flags: CompileFlags, store: PchStore, source: str, pairs: list[tuple[str, str]], name: str, tmp: Path,
    steps: list[dict[str, Any]], found: list[dict[str, str]],
) -> FastResult:  # fmt: skip
    pch = store.include_flags("full", flags)
    if not pch:
        found.append(decline("precompiled_header", _NO_HEADER.format(header="torch/extension.h")))
    src = tmp / "main.cpp"
    src.write_text(source + ("\n" + _binding_block(pairs) if pairs else ""))
    unit = store.unit_flags("full", flags) if pch else flags
    if unit is not flags:
        steps.append(_BY_PRAGMA)
    rc, out, cmd = _compile(unit, pch or [], src, tmp / "main.o", tmp)
    steps.append({"step": "pch_compile" if pch else "compile", "rc": rc})
    if pch:
        store.check_used("full", flags, out)
    if rc != 0:
        return FastResult(False, _error_log(name, cmd, out), "pch", steps)
    rc, out = _link(flags, [tmp / "main.o"], tmp / f"{name}.so", tmp)
    steps.append({"step": "link", "rc": rc})
    if rc != 0:
        return FastResult(False, f"RuntimeError: Error building extension '{name}': FAILED: {name}.so\n{out}", "pch")
    return FastResult(True, "", "pch", steps)


_PCH_MODE = "build mode pch (configure_builds): the split tier is not tried"
_NO_HEADER = ("no precompiled {header} ready for these flags: the unit parsed it in full (one is built in the "
              "background when the header store has room)")  # fmt: skip


def split_overlay(cache: Path) -> Path:
    """An include directory where ``torch/extension.h`` is ``torch/types.h`` (pybind11-free code: split-tier
    candidates, the host part of a CUDA split build)."""
    d = cache / "split_include"
    header = d / "torch" / "extension.h"
    if not header.exists():
        header.parent.mkdir(parents=True, exist_ok=True)
        part = header.with_suffix(f".{unique_suffix()}.tmp")
        part.write_text("#pragma once\n#include <torch/types.h>\n")
        part.replace(header)
    return d


def _final_error(out: str, source_lines: int, extension_names: Callable[[], frozenset[str] | None]) -> bool:
    """True when a split-tier compile error is the candidate's own, whatever header it had included: every
    error is in its source (not our appended lines), and an error of a kind a missing declaration can cause
    names nothing that the headers only ``torch/extension.h`` brings mention (:mod:`.header_names`)."""
    errors = list(_ERROR_LINE.finditer(out))
    if not errors:
        return False
    for e in errors:
        if e.group("file").endswith("main.cpp") and int(e.group("line")) > source_lines:
            return False  # in the lines we appended (e.g. a bound name that does not exist): torch's own words
        if _LOOKUP_ERROR.search(e.group("msg")):
            names = names_in_quotes([e.group("msg")]) - _BUILTIN_WORDS - _KEYWORDS
            known = extension_names()
            if not names or known is None or names & known:
                return False
    return True


def _extension_names(flags: CompileFlags, cache: Path, tmp: Path) -> frozenset[str] | None:
    try:
        return extension_only_names(flags, cache, tmp)
    except OSError as e:  # no verdict from this tier then: the pch tier decides
        log.warning("names of torch/extension.h unavailable: %s", e)
        return None


class _Background:
    """Run ``fn`` on a thread while the candidate compiles (a fresh install's module object, ~15 s), in this
    context (a stop scope of the build stops its compiles too: :mod:`musaenv.toolchains.stopping`)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run, fn), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        self.result = fn()

    def wait(self) -> Any:
        self._thread.join()
        return self.result


def _split_tier(
    flags: CompileFlags, store: PchStore, source: str, pairs: list[tuple[str, str]], name: str, tmp: Path,
    cache: Path, steps: list[dict[str, Any]], found: list[dict[str, str]],
) -> FastResult | str:  # fmt: skip
    """The split tier's build; a string says why it gave the build to the pch tier."""
    # size: one build path in order (unit, signatures, binding objects, stub, link), each step's refusal named
    pch = store.include_flags("split", flags)
    if not pch:
        found.append(decline("precompiled_header", _NO_HEADER.format(header="torch/types.h")))
    module_job = _Background(lambda: module_object(flags, cache, steps))
    scaffold = ["", "template <int I, class T> void musaenv_sig_() {}"]
    for i, (f, _) in enumerate(pairs):
        scaffold.append(f"template void musaenv_sig_<{i}, decltype(&{f})>();")
        scaffold.append(
            f'extern "C" __attribute__((visibility("hidden"))) void* musaenv_fn_{i}() '
            f"{{ return reinterpret_cast<void*>(&{f}); }}"
        )
    user = tmp / "main.cpp"
    user.write_text(source + "\n".join(scaffold) + "\n")
    unit = store.unit_flags("split", flags) if pch else flags
    if unit is not flags:
        steps.append(_BY_PRAGMA)
    rc, out, cmd = _compile(unit, ["-I", str(split_overlay(cache)), *(pch or [])], user, tmp / "main.o", tmp)
    steps.append({"step": "split_compile" if pch else "split_compile_no_pch", "rc": rc})
    if pch:
        store.check_used("split", flags, out)
    if rc != 0:
        names = functools.partial(_extension_names, flags, cache, tmp)
        if _final_error(out, source.count("\n") + 1, names) or out_of_space(tmp):  # a full disk fails every tier
            steps.append({"step": "verdict_from_split"})
            module_job.wait()
            return FastResult(False, _error_log(name, cmd, out), "split", steps)
        module_job.wait()  # useful to every later build; and no half-written object is left behind
        # may be the narrower header's doing: the pch tier gives the authoritative error
        return "a compile error that torch/types.h (without pybind11) may cause: the full header decides"
    module = module_job.wait()
    sigs = _signatures(tmp / "main.o", len(pairs), tmp)
    if module is None:
        return "the shared pybind11 module object could not be built"
    if sigs is None:
        return "a bound function's signature names a type of the source's own: its binding cannot be shared"
    bound = binding_objects(flags, list(dict.fromkeys(sigs)), cache, steps)
    stub = _stub(pairs, sigs, name, tmp)
    renamed = _renamed_module(module, name, tmp)
    if bound is None or renamed is None:
        return "a shared binding object could not be built or renamed"
    rc, _, _ = _compile(flags, [], stub, tmp / "musaenv_stub.o", tmp)
    if rc != 0:
        return "the binding stub did not compile"
    rc, _ = _link(flags, [tmp / "main.o", *bound, tmp / "musaenv_stub.o", renamed], tmp / f"{name}.so", tmp)
    steps.append({"step": "link", "rc": rc})
    return FastResult(True, "", "split", steps) if rc == 0 else "the split objects did not link"


def _renamed_module(module: Path, name: str, tmp: Path) -> Path | None:
    """The module object with its ``PyInit_`` symbol renamed to this module's name."""
    renamed = tmp / "musaenv_module.o"
    rc, _ = run_tool(
        ["objcopy", f"--redefine-sym=PyInit_musaenv_generic_module=PyInit_{name}", str(module), str(renamed)], tmp, 60
    )
    return renamed if rc == 0 else None


def _signatures(obj: Path, n: int, tmp: Path) -> list[str] | None:
    """``decltype(&fn)`` of each bound function, spelled by the demangler (fully qualified, canonical)."""
    rc, out = run_tool(["nm", "-P", str(obj)], tmp, 60)
    if rc != 0:
        return None
    mangled = [line.split()[0] for line in out.splitlines() if "musaenv_sig_" in line]
    rc, out = run_tool(["c++filt", *mangled], tmp, 60) if mangled else (1, "")
    found: dict[int, str] = {}
    for line in out.splitlines():
        m = _SIG_SYMBOL.match(line.strip())
        if m and _spellable(m.group(2)):
            found[int(m.group(1))] = m.group(2)
    return [found[i] for i in range(n)] if len(found) == n and set(found) == set(range(n)) else None


def _spellable(sig: str) -> bool:
    """True when a demangled type can be written in a TU that only includes torch (no user-defined types)."""
    if any(bad in sig for bad in ("anonymous", "lambda", "'", "unnamed", "{")):
        return False
    words = (w for w in _TYPE_WORD.findall(sig) if not w.isdigit())
    return all(w in _BUILTIN_WORDS or w.startswith(_KNOWN_NAMESPACES) for w in words)


def _stub(pairs: list[tuple[str, str]], sigs: list[str], name: str, tmp: Path) -> Path:
    """The per-module glue: calls each signature's ``def_`` with the function's address (no headers at all)."""
    lines = ["struct _object;", "typedef struct _object PyObject;", "namespace musaenv_bind {"]
    for sig in dict.fromkeys(sigs):
        lines.append(
            f'__attribute__((visibility("hidden"))) void def_{sig_id(sig)}(PyObject*, const char*, const char*, void*);'
        )
    lines.append("}")
    for i in range(len(pairs)):
        lines.append(f'extern "C" __attribute__((visibility("hidden"))) void* musaenv_fn_{i}();')
    lines.append(f'extern "C" __attribute__((visibility("hidden"))) const char* musaenv_module_name() '
                 f'{{ return "{name}"; }}')  # fmt: skip
    lines.append('extern "C" __attribute__((visibility("hidden"))) int musaenv_module_body(PyObject* m) {')
    for i, ((f, doc), sig) in enumerate(zip(pairs, sigs)):
        lines.append(f'  musaenv_bind::def_{sig_id(sig)}(m, "{f}", "{doc}", musaenv_fn_{i}());')
    lines += ["  return 0;", "}"]
    path = tmp / "musaenv_stub.cpp"
    path.write_text("\n".join(lines) + "\n")
    return path
