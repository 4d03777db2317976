"""Names that ``torch/extension.h`` can declare and the split tier's ``torch/types.h`` cannot.

A split-tier compile error that says a name was not found (or an overload, or a namespace member) can be an
artefact of the narrower header only if the missing declaration is in a header that ``torch/extension.h``
includes and ``torch/types.h`` does not. Those headers are listed by the compiler itself (``-M``, preprocessing
only, ~2 s) and every identifier they contain is collected once per toolchain into ``<cache>/pch``; an error
none of whose quoted names is among them is the candidate's own, whatever header it had included.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from musaenv.toolchains.cpp.compiler import CompileFlags, run_tool, unique_suffix

__all__ = ["extension_only_names", "names_in_quotes"]

log = logging.getLogger(__name__)

_IDENT = re.compile(r"[A-Za-z_]\w*")
_QUOTED = re.compile(r"[‘'`]([^’'‘`]+)[’']")


def _deps(flags: CompileFlags, header: str, tmp: Path) -> set[str] | None:
    src = tmp / f"musaenv_deps_{header.replace('/', '_')}"
    src.write_text(f"#include <{header}>\n")
    rc, out = run_tool([*flags.cxx, *flags.bind_flags(), "-x", "c++", "-M", str(src)], tmp, 120)
    if rc != 0:
        return None
    return {tok for tok in out.replace("\\\n", " ").split()[1:] if tok.endswith((".h", ".hpp", ".hh", ".tcc"))
            or "/include/c++/" in tok}  # fmt: skip


def extension_only_names(flags: CompileFlags, cache: Path, tmp: Path) -> frozenset[str] | None:
    """Identifiers in the headers only ``torch/extension.h`` brings (computed once, kept in ``cache``)."""
    path = cache / f"extension_only_names-{flags.bind_key()}.json"
    try:
        return frozenset(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    full, types = _deps(flags, "torch/extension.h", tmp), _deps(flags, "torch/types.h", tmp)
    if full is None or types is None:
        return None
    names: set[str] = set()
    for header in sorted(full - types):
        try:
            names.update(_IDENT.findall(Path(header).read_text(errors="replace")))
        except OSError:
            return None  # a header we cannot read could declare anything
    part = path.with_name(f".{path.name}.{unique_suffix()}")
    part.write_text(json.dumps(sorted(names)))
    os.replace(part, path)
    return frozenset(names)


def names_in_quotes(messages: Iterable[str]) -> set[str]:
    """Identifiers inside the quoted parts of compiler messages (the names GCC says it could not find)."""
    return {name for msg in messages for quoted in _QUOTED.findall(msg) for name in _IDENT.findall(quoted)}
