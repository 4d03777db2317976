"""The cached binding objects of the split tier (:mod:`musaenv.toolchains.cpp.fastbuild`).

The binding is ``m.def(name, torch::wrap_pybind_function(fn), doc)``, as ``load_inline`` writes it, compiled once
per (function type, binding flags) into objects under ``<cache>/pch/bind/<bind key>/``, plus one generic
``PYBIND11_MODULE`` object whose ``PyInit_`` symbol is renamed per module. They include ``torch/python.h`` (the
part of ``torch/extension.h`` that declares pybind11, torch's type casters and ``wrap_pybind_function``; measured
here: ~10 s of parsing against ~23 s for all of ``torch/extension.h``) and need no precompiled header, so a fresh
install's first build does not wait for one. The module object also holds the function types KernelBench
candidates use most (:data:`COMMON_SIGNATURES`, ~0.2 s each), so most candidates never compile a binding.

Keyed only on the flags that change these objects (:func:`musaenv.toolchains.cpp.flagkeys.bind_key_flags`): a candidate
with ``-march=native -DBLOCK=64`` links the same binding objects as one with ``-O3``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from musaenv.toolchains.cpp.compiler import CompileFlags, file_lock, run_tool, unique_suffix

__all__ = ["COMMON_SIGNATURES", "binding_objects", "module_object"]

log = logging.getLogger(__name__)

BIND_HEADER = "torch/python.h"
_T, _C = "at::Tensor", "at::Tensor const&"
# Function types (as the demangler spells decltype(&fn)) compiled with the module object.
COMMON_SIGNATURES = tuple(
    f"at::Tensor (*)({args})"
    for args in (
        _T, f"{_T}, {_T}", f"{_T}, {_T}, {_T}", f"{_T}, {_T}, {_T}, {_T}",
        _C, f"{_C}, {_C}", f"{_C}, {_C}, {_C}", f"{_C}, {_C}, {_C}, {_C}",
        f"{_T}, double", f"{_T}, float", f"{_T}, long", f"{_T}, int",
        f"{_C}, double", f"{_C}, float", f"{_C}, long", f"{_C}, int",
        f"{_T}, {_T}, double", f"{_C}, {_C}, double", f"{_T}, {_T}, float", f"{_C}, {_C}, float",
    )
)  # fmt: skip


def sig_id(sig: str) -> str:
    """Short stable id of a function type (names the ``def_`` symbol that binds it)."""
    return hashlib.sha256(sig.encode()).hexdigest()[:16]


def _def_source(sigs: list[str]) -> list[str]:
    lines = ["namespace musaenv_bind {"]
    for sig in sigs:
        lines += [
            f'__attribute__((weak, visibility("hidden"))) void def_{sig_id(sig)}(PyObject* mod, const char* name, '
            "const char* doc, void* fn) {",
            f"  using Sig = {sig};",
            "  auto m = pybind11::reinterpret_borrow<pybind11::module_>(mod);",
            "  m.def(name, torch::wrap_pybind_function(reinterpret_cast<Sig>(fn)), doc);",
            "}",
        ]
    return [*lines, "}  // namespace musaenv_bind", ""]


def _cached_object(path: Path, source: str, flags: CompileFlags, steps: list[dict[str, Any]]) -> bool:
    """Compile ``source`` into ``path`` once (under a lock, renamed into place); True when it exists."""
    if path.exists():
        return True
    with file_lock(path.with_name(f".{path.name}.lock")):
        if path.exists():
            return True
        src = path.with_suffix(".cpp")
        src.write_text(source)
        part = path.with_name(f".{path.name}.{unique_suffix()}.part")
        cmd = [*flags.cxx, *flags.bind_flags(), "-DTORCH_EXTENSION_NAME=musaenv_generic_module"]
        rc, out = run_tool([*cmd, "-c", str(src), "-o", str(part)], path.parent)
        steps.append({"step": f"cache_object:{path.name}", "rc": rc})
        if rc != 0:
            log.warning("binding object %s failed: %s", path.name, out[-800:])
            part.unlink(missing_ok=True)
            return False
        part.replace(path)
    return True


def _write_refs(d: Path, obj: Path, sigs: list[str]) -> None:
    for sig in sigs:
        part = d / f".def_{sig_id(sig)}.{unique_suffix()}.json"
        part.write_text(json.dumps({"object": obj.name, "signature": sig}))
        os.replace(part, d / f"def_{sig_id(sig)}.json")


def _read_ref(path: Path) -> Path | None:
    try:
        obj = path.parent / str(json.loads(path.read_text())["object"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return obj if obj.exists() else None


def module_object(flags: CompileFlags, cache: Path, steps: list[dict[str, Any]]) -> Path | None:
    """The generic ``PYBIND11_MODULE`` object (with the common ``def_`` functions) of these flags, built once."""
    d = cache / "bind" / flags.bind_key()
    path = d / "module.o"
    if path.exists():
        return path
    d.mkdir(parents=True, exist_ok=True)
    source = "\n".join([
        f"#include <{BIND_HEADER}>",
        'extern "C" __attribute__((visibility("hidden"))) int musaenv_module_body(PyObject* m);',
        'extern "C" __attribute__((visibility("hidden"))) const char* musaenv_module_name();',
        "PYBIND11_MODULE(musaenv_generic_module, m) {",
        "  if (m.attr(\"__name__\").cast<std::string>() != musaenv_module_name()) {",
        "    m.attr(\"__name__\") = musaenv_module_name();  // single-phase init (pybind11 2.x) names by def",
        "  }",
        "  if (musaenv_module_body(m.ptr()) != 0) throw pybind11::error_already_set();",
        "}",
        *_def_source(list(COMMON_SIGNATURES)),
    ])  # fmt: skip
    if not _cached_object(path, source, flags, steps):
        return None
    _write_refs(d, path, list(COMMON_SIGNATURES))
    return path


def binding_objects(
    flags: CompileFlags, sigs: list[str], cache: Path, steps: list[dict[str, Any]]
) -> list[Path] | None:
    """Objects defining ``def_<id>`` for every signature beyond the module object's; the missing ones are
    compiled together, in one unit (~15 s for a batch, each extra one ~0.2 s). ``def_<id>.json`` records which
    object holds a signature. Definitions are weak, so two objects that both hold one (two builders raced) link."""
    d = cache / "bind" / flags.bind_key()
    module = d / "module.o"
    found: dict[str, Path] = {}
    for sig in sigs:
        ref = _read_ref(d / f"def_{sig_id(sig)}.json")
        if ref is not None:
            found[sig] = ref
    missing = [sig for sig in sigs if sig not in found]
    if missing:
        obj = d / f"defs_{sig_id(chr(10).join(missing))}.o"
        d.mkdir(parents=True, exist_ok=True)
        source = "\n".join([f"#include <{BIND_HEADER}>", *_def_source(missing)])
        if not _cached_object(obj, source, flags, steps):
            return None
        _write_refs(d, obj, missing)
        found.update(dict.fromkeys(missing, obj))
    # The module object is linked (renamed) anyway; its definitions must not be linked twice.
    return [p for p in dict.fromkeys(found[sig] for sig in sigs) if p != module]
