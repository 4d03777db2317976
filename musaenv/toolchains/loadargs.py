"""``load_inline``'s arguments, once: their order, what each holds, the backends' spellings, and how a value is read.

Three readers meet a candidate's ``load_inline(...)`` call: the worker's loader hook (the keyword arguments at run
time, :meth:`musaenv.toolchains.buildspec.BuildSpec.from_load_inline`), the static checks (the call's AST,
:mod:`musaenv.verification.static_sources`) and the Ray prefetch (the AST again,
:mod:`musaenv.evaluator.ray_artifacts`). They all read the arguments from :data:`LOAD_INLINE_ARGS` and map a
backend's own spelling (torch_musa's ``musa_sources``) with :func:`canonical`, so a keyword added here (or to a
backend's ``loader_aliases``) reaches every reader. Imports nothing heavy: the worker and the static checks use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from musaenv.backends import REGISTRY
from musaenv.toolchains.flags import normalise_flags

__all__ = [
    "FLAG_KWARGS",
    "LIST_KWARGS",
    "LOAD_INLINE_ARGS",
    "LoadArg",
    "aliases",
    "canonical",
    "flag_keywords",
    "normalise_functions",
    "normalise_list",
    "positional_name",
    "source_kind",
]


@dataclass(frozen=True)
class LoadArg:
    """One parameter of torch's ``load_inline``.

    Attributes:
        name: Torch's keyword.
        holds: ``sources``, ``flags``, ``paths`` (lists of strings, or one string), ``functions``, or ``other``.
        source_kind: For ``sources``: the kind of text it holds (``cpp``, ``cuda``, ``sycl``).
        built: musaenv builds it (a :class:`~musaenv.toolchains.buildspec.BuildSpec` field); SYCL is refused.
    """

    name: str
    holds: str = "other"
    source_kind: str = ""
    built: bool = True


LOAD_INLINE_ARGS: tuple[LoadArg, ...] = (
    LoadArg("name"),
    LoadArg("cpp_sources", "sources", "cpp"),
    LoadArg("cuda_sources", "sources", "cuda"),
    LoadArg("sycl_sources", "sources", "sycl", built=False),
    LoadArg("functions", "functions"),
    LoadArg("extra_cflags", "flags"),
    LoadArg("extra_cuda_cflags", "flags"),
    LoadArg("extra_sycl_cflags", "flags", built=False),
    LoadArg("extra_ldflags", "flags"),
    LoadArg("extra_include_paths", "paths"),
    LoadArg("build_directory"),
    LoadArg("verbose"),
    LoadArg("with_cuda"),
)
"""torch's ``load_inline`` parameters in positional order (torch 2.13; later ones, keyword-only in practice, are
read by nobody here)."""

_BY_NAME = {a.name: a for a in LOAD_INLINE_ARGS}
LIST_KWARGS: tuple[str, ...] = tuple(
    a.name for a in LOAD_INLINE_ARGS if a.built and a.holds in ("sources", "flags", "paths")
)
"""The list-of-strings arguments a build spec carries."""
FLAG_KWARGS: tuple[str, ...] = tuple(a.name for a in LOAD_INLINE_ARGS if a.built and a.holds == "flags")
"""The flag lists a build spec carries (normalised as torch's shell splits them)."""


def aliases() -> dict[str, str]:
    """Every backend's own spelling of a torch keyword (``musa_sources`` -> ``cuda_sources``)."""
    return {alias: ours for b in REGISTRY.values() for alias, ours in b.loader_aliases.items()}


def canonical(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each backend spelling renamed to torch's (a copy)."""
    out = dict(kwargs)
    for alias, ours in aliases().items():
        if alias in out:  # the backend's spelling wins over torch's, as its own load_inline would read it
            out[ours] = out.pop(alias)
    return out


def positional_name(index: int) -> str | None:
    """The keyword of ``load_inline``'s positional argument ``index``, ``None`` past the table."""
    return LOAD_INLINE_ARGS[index].name if 0 <= index < len(LOAD_INLINE_ARGS) else None


def source_kind(keyword: str) -> str | None:
    """The kind of source text a keyword holds (``cpp``, ``cuda``, ``sycl``; a backend's device-source alias: that
    backend's name, ``musa``), ``None`` for a keyword that holds none."""
    for b in REGISTRY.values():
        if _BY_NAME.get(b.loader_aliases.get(keyword, ""), LoadArg("")).holds == "sources":
            return b.name
    arg = _BY_NAME.get(keyword)
    return arg.source_kind if arg is not None and arg.holds == "sources" else None


def flag_keywords() -> tuple[str, ...]:
    """Every keyword that holds compiler or linker flags, torch's and the backends' spellings."""
    torch_flags = tuple(a.name for a in LOAD_INLINE_ARGS if a.holds == "flags")
    return torch_flags + tuple(k for k, ours in aliases().items() if _BY_NAME[ours].holds == "flags")


def normalise_list(key: str, value: object) -> tuple[str, ...]:
    """A list argument as a build reads it: ``None`` -> empty, a string -> one item; flags as torch's shell splits
    them (:func:`musaenv.toolchains.flags.normalise_flags`), include paths stripped with empty ones dropped.

    Raises:
        TypeError: not a string or a list of strings (``load_inline`` would not accept it either).
        ValueError: a flag list with unbalanced quotes (torch's shell would fail the build command).
    """
    v: Any = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
        raise TypeError(f"load_inline: {key} must be a string or a list of strings")
    if _BY_NAME[key].holds == "flags":  # torch strips, joins and lets the shell split (musaenv.toolchains.flags)
        return tuple(normalise_flags(v))
    if _BY_NAME[key].holds == "paths":
        return tuple(p.strip() for p in v if p.strip())
    return tuple(v)


def normalise_functions(value: object) -> tuple[str, ...] | dict[str, str] | None:
    """``functions=`` as a build reads it: a name -> one name, a list -> a tuple, a dict of docstrings kept.

    Raises:
        TypeError: of another type, or a dict that does not map names to docstrings.
    """
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict):
        if not all(isinstance(k, str) and isinstance(d, str) for k, d in value.items()):
            raise TypeError("load_inline: functions dict must map names to docstrings")
        return dict(value)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise TypeError("load_inline: functions must be a list of names")
    return tuple(value)
