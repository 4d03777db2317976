"""Fast builds of CPU C++ candidates: torch's sources and flags, our own compiler driving.

The produced module is what ``load_inline(name, cpp_sources, functions=...)`` produces: the same ``main.cpp``
text, torch's own compile and link flags (read from torch, see :mod:`musaenv.backends.pch`), the candidate's
flags untouched, ``TORCH_EXTENSION_NAME`` set to the module name, every function bound with
``m.def(name, torch::wrap_pybind_function(fn), doc)`` in the order given. Two tiers, tried in order:

``split``
    The candidate's code is compiled *without* pybind11: a directory earlier on the include path maps
    ``torch/extension.h`` to ``torch/types.h`` (ATen, ``torch::Tensor`` and the torch factory functions, with a
    precompiled ``torch/types.h``); code that needs more (``torch::nn``, Python) fails here and goes to ``pch``.
    The binding goes in other translation units: one object per function *signature* (read back from a symbol
    whose mangled name spells ``decltype(&fn)``) and one generic ``PYBIND11_MODULE`` object whose ``PyInit_``
    symbol is renamed to the module's name; both are built once and cached under ``<cache>/pch/bind``. Only for
    sources that never mention Python or pybind11; anything unexpected falls through to the next tier.
``pch``
    Torch's exact ``main.cpp`` compiled with a precompiled ``torch/extension.h``. Its compiler errors are the
    verdict (same source, same flags, same file name as ``load_inline`` would report).

Callers fall back to torch's ``load_inline`` when neither tier can run (e.g. a torch whose flag helpers changed).

Why our own driver rather than a build tool: ``load_inline`` (ninja under it) compiles the candidate's code and
its pybind11 binding in one translation unit with all of ``torch/extension.h`` every time, and its ``use_pch`` keeps
one header in site-packages (see :mod:`musaenv.backends.pch`); ccache keys on the whole preprocessed unit, so a new
candidate never hits. The savings here come from choosing the translation units (the binding apart, shared per
signature; a precompiled header per flag set in the cache), which no build tool decides for us. The compiler and
its flags stay torch's.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.backends.pch import CompileFlags, PchStore, file_lock, run_tool, torch_flags, unique_suffix

__all__ = ["FastResult", "fast_build", "linking_with"]

log = logging.getLogger(__name__)

# Sources that may need Python or pybind11 declarations keep the full torch/extension.h (tier ``pch``).
_NEEDS_PYTHON = re.compile(
    r"pybind11|PYBIND11|\bpy::|Python\.h|torch/python\.h|\bPy[A-Z_]\w*|\b_object\b|\bTHP\w*|torch::python"
    r"|wrap_pybind_function|HANDLE_TH_ERRORS"
)
_IDENT = re.compile(r"^[A-Za-z_]\w*(::[A-Za-z_]\w*)*$")
_SIG_SYMBOL = re.compile(r"^void musaenv_sig_<(\d+), (.+)>\(\)$")
_TYPE_WORD = re.compile(r"[A-Za-z_][\w:]*")
_BUILTIN_WORDS = {"long", "int", "short", "char", "bool", "double", "float", "void", "unsigned", "signed", "const",
                  "volatile", "noexcept", "wchar_t", "char8_t", "char16_t", "char32_t"}  # fmt: skip
_KNOWN_NAMESPACES = ("at::", "c10::", "std::", "torch::", "caffe2::")


@dataclass
class FastResult:
    """Outcome of :func:`fast_build`.

    Attributes:
        ok: The module ``<tmp>/<name>.so`` was produced.
        log: Compiler output (for failures: the verdict, formatted like torch's build errors).
        tier: ``split`` or ``pch`` (the tier that decided).
        steps: What was tried, with seconds, for benchmarks and logs.
    """

    ok: bool
    log: str
    tier: str
    steps: list[dict[str, Any]] = field(default_factory=list)


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


def _compile(flags: CompileFlags, extra: list[str], src: Path, obj: Path, tmp: Path) -> tuple[int, str, list[str]]:
    cmd = [*flags.cxx, *flags.cflags, *extra, "-c", str(src), "-o", str(obj)]
    rc, out = run_tool(cmd, tmp)
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


def _link(flags: CompileFlags, objs: list[Path], out: Path, tmp: Path) -> tuple[int, str]:
    linker = _LINKER.get()
    if linker is not None:
        return linker(objs, out)
    return run_tool([*flags.cxx, *[str(o) for o in objs], *flags.ldflags, "-o", str(out)], tmp)


def _error_log(name: str, cmd: list[str], out: str) -> str:
    """A build failure in the shape torch reports it (the compiler's own lines verbatim)."""
    return f"RuntimeError: Error building extension '{name}': FAILED: main.o\n{' '.join(cmd)}\n{out}"


def fast_build(spec: dict[str, Any], name: str, tmp: Path, cache: Path, mode: str = "fast") -> FastResult | None:
    """Build ``spec`` into ``tmp/<name>.so`` without torch's ``load_inline``; ``None`` means "use load_inline".

    Args:
        spec: A :class:`~musaenv.backends.loader.BuildSpec` as a dict.
        name: Module name (``TORCH_EXTENSION_NAME``).
        tmp: Private build directory.
        cache: The ``pch`` cache directory.
        mode: ``fast`` (split, then pch) or ``pch`` (pch only).
    """
    if spec.get("cuda_sources") or spec.get("with_cuda") or not spec.get("cpp_sources"):
        return None
    try:
        flags = torch_flags(
            cache, name, spec.get("extra_cflags") or (), spec.get("extra_ldflags") or (),
            spec.get("extra_include_paths") or (),
        )  # fmt: skip
    except (RuntimeError, ValueError, OSError, ImportError, AttributeError, TypeError) as e:
        log.warning("fast build unavailable, using load_inline: %s", e)
        return None
    timeout = spec.get("timeout_s")
    store = PchStore(cache, deadline=time.monotonic() + float(timeout) if timeout else None)
    store.sweep()
    source, pairs = _main_cpp(spec)
    steps: list[dict[str, Any]] = []
    if mode == "fast" and _split_eligible(spec, source, pairs):
        try:
            res = _split_tier(flags, store, source, pairs, name, tmp, cache, steps)
        except OSError as e:  # e.g. binutils (nm, c++filt, objcopy) missing: the pch tier needs none of them
            log.warning("split build unavailable: %s", e)
            res = None
        if res is not None:
            return res
    return _pch_tier(flags, store, source, pairs, name, tmp, steps)


def _split_eligible(spec: dict[str, Any], source: str, pairs: list[tuple[str, str]]) -> bool:
    if not pairs or _NEEDS_PYTHON.search(source):
        return False
    if not all(_IDENT.match(f) for f, _ in pairs):
        return False
    return all(not re.search(r'["\\\n]', doc) for _, doc in pairs)


def _pch_tier(
    flags: CompileFlags, store: PchStore, source: str, pairs: list[tuple[str, str]], name: str, tmp: Path,
    steps: list[dict[str, Any]],
) -> FastResult | None:  # fmt: skip
    pch = store.include_flags("full", flags)
    if pch is None:
        return None
    src = tmp / "main.cpp"
    src.write_text(source + ("\n" + _binding_block(pairs) if pairs else ""))
    rc, out, cmd = _compile(flags, pch, src, tmp / "main.o", tmp)
    steps.append({"step": "pch_compile", "rc": rc})
    store.check_used("full", flags, out)
    if rc != 0:
        return FastResult(False, _error_log(name, cmd, out), "pch", steps)
    rc, out = _link(flags, [tmp / "main.o"], tmp / f"{name}.so", tmp)
    steps.append({"step": "link", "rc": rc})
    if rc != 0:
        return FastResult(False, f"RuntimeError: Error building extension '{name}': FAILED: {name}.so\n{out}", "pch")
    return FastResult(True, "", "pch", steps)


def _split_overlay(cache: Path) -> Path:
    """An include directory where ``torch/extension.h`` is ``torch/types.h`` (pybind11-free candidates only)."""
    d = cache / "split_include"
    header = d / "torch" / "extension.h"
    if not header.exists():
        header.parent.mkdir(parents=True, exist_ok=True)
        part = header.with_suffix(f".{unique_suffix()}.tmp")
        part.write_text("#pragma once\n#include <torch/types.h>\n")
        part.replace(header)
    return d


def _split_tier(
    flags: CompileFlags, store: PchStore, source: str, pairs: list[tuple[str, str]], name: str, tmp: Path,
    cache: Path, steps: list[dict[str, Any]],
) -> FastResult | None:  # fmt: skip
    pch = store.include_flags("split", flags)
    if pch is None:
        return None
    scaffold = ["", "template <int I, class T> void musaenv_sig_() {}"]
    for i, (f, _) in enumerate(pairs):
        scaffold.append(f"template void musaenv_sig_<{i}, decltype(&{f})>();")
        scaffold.append(
            f'extern "C" __attribute__((visibility("hidden"))) void* musaenv_fn_{i}() '
            f"{{ return reinterpret_cast<void*>(&{f}); }}"
        )
    user = tmp / "main.cpp"
    user.write_text(source + "\n".join(scaffold) + "\n")
    rc, out, _ = _compile(flags, ["-I", str(_split_overlay(cache)), *pch], user, tmp / "main.o", tmp)
    steps.append({"step": "split_compile", "rc": rc})
    store.check_used("split", flags, out)
    if rc != 0:
        return None  # the pch tier gives the authoritative error (or succeeds where the light header did not)
    sigs = _signatures(tmp / "main.o", len(pairs), tmp)
    if sigs is None:
        return None
    bound = _binding_objects(flags, store, list(dict.fromkeys(sigs)), cache, steps)
    if bound is None:
        return None
    objs = [tmp / "main.o", *bound]
    module = _module_object(flags, store, name, cache, tmp, steps)
    stub = _stub(pairs, sigs, name, tmp)
    if module is None or stub is None:
        return None
    rc, _, _ = _compile(flags, [], stub, tmp / "musaenv_stub.o", tmp)
    if rc != 0:
        return None
    rc, _ = _link(flags, [*objs, tmp / "musaenv_stub.o", module], tmp / f"{name}.so", tmp)
    steps.append({"step": "link", "rc": rc})
    return FastResult(True, "", "split", steps) if rc == 0 else None


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


def _sig_id(sig: str) -> str:
    return hashlib.sha256(sig.encode()).hexdigest()[:16]


def _cached_object(path: Path, source: str, flags: CompileFlags, pch: list[str], steps: list[dict[str, Any]]) -> bool:
    """Compile ``source`` into ``path`` once (under a lock, renamed into place); True when it exists."""
    if path.exists():
        return True
    with file_lock(path.with_name(f".{path.name}.lock")):
        if path.exists():
            return True
        src = path.with_suffix(".cpp")
        src.write_text(source)
        part = path.with_name(f".{path.name}.part")
        cmd = [*flags.cxx, *flags.pch_flags(), "-DTORCH_EXTENSION_NAME=musaenv_generic_module", *pch]
        rc, out = run_tool([*cmd, "-c", str(src), "-o", str(part)], path.parent)
        steps.append({"step": f"cache_object:{path.name}", "rc": rc})
        if rc != 0:
            log.warning("binding object %s failed: %s", path.name, out[-800:])
            part.unlink(missing_ok=True)
            return False
        part.replace(path)
    return True


def _binding_objects(
    flags: CompileFlags, store: PchStore, sigs: list[str], cache: Path, steps: list[dict[str, Any]]
) -> list[Path] | None:
    """Objects defining ``def_<id>`` for every signature; the missing ones are compiled together, in one unit.

    The ~14 s a unit with ``torch/extension.h`` costs is paid once per batch of new signatures (each extra one
    adds about a second); ``def_<id>.json`` records which object holds a signature. Definitions are weak, so two
    objects that both hold one (two builders raced) still link.
    """
    d = cache / "bind" / flags.key()
    found: dict[str, Path] = {}
    for sig in sigs:
        ref = _read_ref(d / f"def_{_sig_id(sig)}.json")
        if ref is not None:
            found[sig] = ref
    missing = [sig for sig in sigs if sig not in found]
    if missing:
        obj = d / f"defs_{_sig_id(chr(10).join(missing))}.o"
        lines = ["#include <torch/extension.h>", "namespace musaenv_bind {"]
        for sig in missing:
            lines += [
                f'__attribute__((weak, visibility("hidden"))) void def_{_sig_id(sig)}(PyObject* mod, const char* name, '
                "const char* doc, void* fn) {",
                f"  using Sig = {sig};",
                "  auto m = pybind11::reinterpret_borrow<pybind11::module_>(mod);",
                "  m.def(name, torch::wrap_pybind_function(reinterpret_cast<Sig>(fn)), doc);",
                "}",
            ]
        d.mkdir(parents=True, exist_ok=True)
        source = "\n".join([*lines, "}  // namespace musaenv_bind", ""])
        if not _cached_object(obj, source, flags, store.include_flags("full", flags) or [], steps):
            return None
        for sig in missing:
            part = d / f".def_{_sig_id(sig)}.{unique_suffix()}.json"
            part.write_text(json.dumps({"object": obj.name, "signature": sig}))
            os.replace(part, d / f"def_{_sig_id(sig)}.json")
            found[sig] = obj
    return list(dict.fromkeys(found[sig] for sig in sigs))


def _read_ref(path: Path) -> Path | None:
    try:
        obj = path.parent / str(json.loads(path.read_text())["object"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return obj if obj.exists() else None


def _module_object(
    flags: CompileFlags, store: PchStore, name: str, cache: Path, tmp: Path, steps: list[dict[str, Any]]
) -> Path | None:
    """The generic ``PYBIND11_MODULE`` object, with its ``PyInit_`` symbol renamed to this module's name."""
    path = cache / "bind" / flags.key() / "module.o"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        source = "\n".join([
            "#include <torch/extension.h>",
            'extern "C" __attribute__((visibility("hidden"))) int musaenv_module_body(PyObject* m);',
            'extern "C" __attribute__((visibility("hidden"))) const char* musaenv_module_name();',
            "PYBIND11_MODULE(musaenv_generic_module, m) {",
            "  if (m.attr(\"__name__\").cast<std::string>() != musaenv_module_name()) {",
            "    m.attr(\"__name__\") = musaenv_module_name();  // single-phase init (pybind11 2.x) names by def",
            "  }",
            "  if (musaenv_module_body(m.ptr()) != 0) throw pybind11::error_already_set();",
            "}",
        ])  # fmt: skip
        if not _cached_object(path, source + "\n", flags, store.include_flags("full", flags) or [], steps):
            return None
    renamed = tmp / "musaenv_module.o"
    rc, _ = run_tool(
        ["objcopy", f"--redefine-sym=PyInit_musaenv_generic_module=PyInit_{name}", str(path), str(renamed)], tmp, 60
    )
    return renamed if rc == 0 else None


def _stub(pairs: list[tuple[str, str]], sigs: list[str], name: str, tmp: Path) -> Path | None:
    """The per-module glue: calls each signature's ``def_`` with the function's address (no headers at all)."""
    lines = ["struct _object;", "typedef struct _object PyObject;", "namespace musaenv_bind {"]
    for sig in dict.fromkeys(sigs):
        lines.append(
            f'__attribute__((visibility("hidden"))) void def_{_sig_id(sig)}(PyObject*, const char*, const char*, '
            "void*);"
        )
    lines.append("}")
    for i in range(len(pairs)):
        lines.append(f'extern "C" __attribute__((visibility("hidden"))) void* musaenv_fn_{i}();')
    lines.append(f'extern "C" __attribute__((visibility("hidden"))) const char* musaenv_module_name() '
                 f'{{ return "{name}"; }}')  # fmt: skip
    lines.append('extern "C" __attribute__((visibility("hidden"))) int musaenv_module_body(PyObject* m) {')
    for i, ((f, doc), sig) in enumerate(zip(pairs, sigs)):
        lines.append(f'  musaenv_bind::def_{_sig_id(sig)}(m, "{f}", "{doc}", musaenv_fn_{i}());')
    lines += ["  return 0;", "}"]
    path = tmp / "musaenv_stub.cpp"
    path.write_text("\n".join(lines) + "\n")
    return path
