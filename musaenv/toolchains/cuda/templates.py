"""Template kernels in the CUDA split: which instances the unsplit unit's launches make, spelled for the shims.

A template kernel's launch shim (:mod:`musaenv.toolchains.cuda.split`) is a template too, declared in the host unit and
explicitly instantiated in the device unit for exactly the template arguments the candidate's launches use, so
the device unit compiles the instances the unsplit unit compiles, no more (an error only another instance shows
would otherwise become the split's verdict) and no fewer (the host unit's calls would not link). That holds only
where every launch's arguments are known without compiling anything:

* a type parameter (``typename T``/``class T``): one built-in arithmetic type, or ``scalar_t`` where the launch
  lies inside one of torch's dispatch macros whose types are all built-in (:data:`DISPATCH_TYPES`:
  ``AT_DISPATCH_FLOATING_TYPES`` double and float; ``..._INTEGRAL_TYPES`` uint8_t, int8_t, int, int64_t, int16_t;
  ``..._ALL_TYPES`` both), and the launch's code defines no ``scalar_t`` of its own (``using scalar_t =
  scalar_t;``, which names the dispatch's type again, is no other);
* a non-type parameter of an integral type (``int N``, ``bool B``, ...): an integer literal, ``true``/``false``, a
  macro the source defines once as an integer literal (never undefined), or a local constant of the launching
  function, ``const int B = 256;`` (``constexpr`` too), declared once in it, before the launch, in a block around
  it, and no other name of it declared there (nor a macro of its name anywhere).

A launch inside a host template is instantiated as that template is (:class:`HostTemplates`). Anything else
(deduced arguments, default arguments, template template parameters, ``if constexpr`` around a launch) is not
split.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

__all__ = [
    "DISPATCH_TYPES",
    "HostTemplates",
    "TemplateParams",
    "instances",
    "launch_instances",
    "literal_macros",
    "template_head",
]

_FLOATING = ("double", "float")
_INTEGRAL = ("uint8_t", "int8_t", "int", "int64_t", "int16_t")  # c10's Byte, Char, Int, Long, Short
# torch's dispatch macros (ATen/Dispatch.h) whose cases are all built-in types, by the types they instantiate.
DISPATCH_TYPES = {
    "AT_DISPATCH_FLOATING_TYPES": _FLOATING,
    "AT_DISPATCH_INTEGRAL_TYPES": _INTEGRAL,
    "AT_DISPATCH_ALL_TYPES": _INTEGRAL + _FLOATING,
}
_BUILTIN_TYPE = re.compile(
    r"^(float|double|int|unsigned int|unsigned|long|long long|unsigned long|short|char|bool"
    r"|u?int(8|16|32|64)_t)$"
)
_NONTYPE = re.compile(r"^(int|unsigned|unsigned int|bool|size_t|long|unsigned long|short|char|int64_t|uint32_t)$")
_TEMPLATE = re.compile(r"\s*template\s*<([^<>{};]*)>")
_PARAM = re.compile(r"^\s*(typename|class|[A-Za-z_][\w ]*?)\s+([A-Za-z_]\w*)\s*$")
_INT_LITERAL = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)[uUlL]*$|^(true|false)$")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(-?\d+[uUlL]*)[ \t]*$", re.M)
_MACRO_NAMES = re.compile(r"^[ \t]*#[ \t]*(?:define|undef)[ \t]+([A-Za-z_]\w*)", re.M)
_SAME_SCALAR_T = re.compile(r"\busing\s+scalar_t\s*=\s*scalar_t\s*;")  # names the dispatch's own type again
_LOCAL_CONST = re.compile(
    r"\b(?:static\s+)?(?:const|constexpr)\s+(?:const\s+)?(?:int|unsigned(?:\s+int)?|size_t|long|int64_t|bool)\s+"
    r"(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>-?\d+[uUlL]*|true|false)\s*;"
)
_AFTER_TYPE = re.compile(r"(\b[A-Za-z_]\w*|>)\s*[*&]*\s*$")  # a name here may be declared (``int* B``)
_BINDING = re.compile(r"\bauto\s*&{0,2}\s*\[")  # a structured binding declares names after a '['
_IF_CONSTEXPR = re.compile(r"\bif\s+constexpr\b")  # a discarded branch instantiates nothing
_OWN_SCALAR_T = re.compile(r"\busing\s+scalar_t\b|\btypedef\b[^;]*\bscalar_t\s*;|\bscalar_t\s*=")


@dataclass(frozen=True)
class TemplateParams:
    """A template kernel's parameters: ``kinds[i]`` is ``typename`` for a type, else the non-type's type."""

    kinds: tuple[str, ...]
    names: tuple[str, ...]

    def head(self) -> str:
        """``template <...> `` for the shim."""
        return f"template <{', '.join(f'{k} {n}' for k, n in zip(self.kinds, self.names, strict=True))}> "


def template_head(code: str) -> tuple[int, TemplateParams | None] | None:
    """``(end, params)`` of the ``template <...>`` that starts ``code`` (``(0, None)`` when none); ``None`` when
    its parameters are not all plain type or integral non-type parameters without defaults."""
    m = _TEMPLATE.match(code)
    if not m:
        return (0, None) if not re.match(r"\s*template\b", code) else None
    kinds, names = [], []
    for part in m.group(1).split(","):
        p = _PARAM.match(part)
        if not p:
            return None
        kind = " ".join(p.group(1).split())
        if kind == "class":
            kind = "typename"
        if kind != "typename" and not _NONTYPE.match(kind):
            return None
        kinds.append(kind)
        names.append(p.group(2))
    return m.end(), TemplateParams(tuple(kinds), tuple(names))


def literal_macros(code: str) -> dict[str, str | None]:
    """Every macro ``code`` (a blanked source) defines or undefines: its integer literal where it is defined once,
    as one, and never undefined; ``None`` otherwise."""
    count: dict[str, int] = {}
    for name in _MACRO_NAMES.findall(code):
        count[name] = count.get(name, 0) + 1
    literal = {name: value for name, value in _DEFINE.findall(code) if count[name] == 1}
    return {name: literal.get(name) for name in count}


def _local_constant(code: str, name: str, at: int) -> str | None:
    """The integer literal a host chunk's ``const int name = <literal>;`` gives ``name`` at offset ``at``: the one
    declaration of ``name`` in ``code`` (every other mention follows punctuation, so declares nothing: a
    parameter, another local, a lambda's parameter would follow a type), before ``at`` in a block around it."""
    decls = [m for m in _LOCAL_CONST.finditer(code) if m["name"] == name]
    if len(decls) != 1 or decls[0].start() > at or _BINDING.search(code):
        return None
    for m in re.finditer(rf"\b{re.escape(name)}\b", code):
        if decls[0].start("name") != m.start() and _AFTER_TYPE.search(code[: m.start()]):
            return None  # after a word or a template's '>': perhaps another declaration (or `return name`)
    depth = 0
    for c in code[decls[0].end() : at]:
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth < 0:
            return None  # the declaration's block closed before the launch
    return decls[0]["value"]


def launch_instances(
    targs: str, params: TemplateParams, code: str, at: int, macros: dict[str, str | None]
) -> list[tuple[str, ...]] | None:
    """The template arguments a launch ``k<targs><<<...>>>`` at offset ``at`` of host chunk ``code`` instantiates
    ``k`` with (several under a dispatch macro); ``None`` when they are not known for certain."""
    args = [" ".join(a.split()) for a in targs.split(",")]
    if len(args) != len(params.kinds) or _IF_CONSTEXPR.search(code):
        return None
    choices: list[tuple[str, ...]] = []
    for arg, kind in zip(args, params.kinds, strict=True):
        if kind == "typename" and _BUILTIN_TYPE.match(arg):
            choices.append((arg,))
        elif kind == "typename" and arg == "scalar_t":
            types = _dispatched(code, at)
            if types is None:
                return None
            choices.append(types)
        elif kind != "typename":
            value = arg if _INT_LITERAL.match(arg) else macros[arg] if arg in macros else _local_constant(code, arg, at)
            if value is None:
                return None
            choices.append((value,))
        else:
            return None
    return list(itertools.product(*choices))


def _dispatched(code: str, at: int) -> tuple[str, ...] | None:
    """The types ``scalar_t`` takes at offset ``at`` of ``code``: the innermost dispatch macro around it, when it
    is one of :data:`DISPATCH_TYPES` and ``code`` defines no ``scalar_t`` itself."""
    if _OWN_SCALAR_T.search(_SAME_SCALAR_T.sub("", code)):
        return None
    inner: tuple[int, str] | None = None
    for m in re.finditer(r"\b(AT_DISPATCH_\w+)\s*\(", code):
        depth, j = 0, m.end() - 1
        while j < len(code):
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            if depth == 0:
                break
            j += 1
        if m.end() <= at < j and (inner is None or m.start() > inner[0]):
            inner = (m.start(), m.group(1))
    return DISPATCH_TYPES.get(inner[1]) if inner else None


def instances(name: str, params: TemplateParams, kernel_params: str, uses: set[tuple[str, ...]]) -> str:
    """Explicit instantiations of kernel ``name``'s shim for each argument list in ``uses`` (the device unit
    defines them; the host unit only declares the template)."""
    out = []
    for args in sorted(uses):
        spelled = f", {kernel_params}" if kernel_params else ""
        for p, a in zip(params.names, args, strict=True):
            spelled = re.sub(rf"\b{p}\b", a, spelled)
        out.append(
            f"template void musaenv_launch_{name}<{', '.join(args)}>(dim3, dim3, size_t, cudaStream_t{spelled});"
        )
    return "\n".join(out)


@dataclass(frozen=True)
class _Launch:
    kernel: str
    targs: str
    code: str  # the host template's chunk, blanked
    at: int


@dataclass
class HostTemplates:
    """Launches inside host function templates (``template <typename T> torch::Tensor f(...)``), whose instances
    are those of ``f``: read from its calls, each ``f<args>(...)`` in a host function that is no template, with
    arguments :func:`launch_instances` knows. Only where every mention of ``f`` is such a call (a deduced call, an
    address, a call from another template or from ``f`` itself would instantiate what is not read); an ``f``
    never called instantiates nothing, as in the unsplit unit."""

    macros: dict[str, str | None]
    params: dict[str, TemplateParams] = field(default_factory=dict)
    launches: dict[str, list[_Launch]] = field(default_factory=dict)
    codes: list[tuple[str, bool]] = field(default_factory=list)  # every host chunk: (code, is a template)

    def add_chunk(self, code: str) -> None:
        """Note a host chunk (before its launches)."""
        self.codes.append((code, bool(re.match(r"\s*template\b", code))))

    def launch(self, code: str, kernel: str, targs: str, at: int) -> bool:
        """Note launch ``kernel<targs>`` at ``at`` of host template chunk ``code``; False when unreadable."""
        head = template_head(code)
        if head is None or head[1] is None or _IF_CONSTEXPR.search(code):
            return False
        name = re.search(r"([A-Za-z_]\w*)\s*\(", code[head[0] : code.find("{") if "{" in code else len(code)])
        if name is None or ("scalar_t" in head[1].names and "AT_DISPATCH" in code):
            return False  # a dispatch's scalar_t would hide the template's own
        if self.params.setdefault(name.group(1), head[1]) != head[1]:
            return False
        self.launches.setdefault(name.group(1), []).append(_Launch(kernel, targs, code, at))
        return True

    def instances(self, kernels: dict[str, TemplateParams]) -> dict[str, set[tuple[str, ...]]] | None:
        """The template arguments each kernel's launches in host templates instantiate; None when unknown."""
        uses: dict[str, set[tuple[str, ...]]] = {}
        for name, launches in self.launches.items():
            calls = self._calls(name, launches[0].code)
            if calls is None:
                return None
            for args in calls:
                for launch in launches:
                    targs = launch.targs
                    for p, a in zip(self.params[name].names, args, strict=True):
                        targs = re.sub(rf"\b{p}\b", a, targs)
                    got = launch_instances(targs, kernels[launch.kernel], launch.code, launch.at, self.macros)
                    if got is None:
                        return None
                    uses.setdefault(launch.kernel, set()).update(got)
        return uses

    def _calls(self, name: str, own: str) -> set[tuple[str, ...]] | None:
        """The argument lists host template ``name`` is called with; None when a mention is not a call read."""
        found: set[tuple[str, ...]] = set()
        word = re.compile(rf"\b{re.escape(name)}\b")
        for code, is_template in self.codes:
            mentions = list(word.finditer(code))
            if code is own:
                if len(mentions) != 1:
                    return None  # recursion, or a second mention in its own body
                continue
            for m in mentions:
                call = re.compile(r"\s*<([^<>;{}()]*)>\s*\(").match(code, m.end())
                got = None if call is None or is_template else self._args(call.group(1), name, code, m.start())
                if got is None:
                    return None
                found.update(got)
        return found

    def _args(self, targs: str, name: str, code: str, at: int) -> list[tuple[str, ...]] | None:
        return launch_instances(" ".join(targs.split()), self.params[name], code, at, self.macros)
