"""Split a ``load_inline`` candidate's CUDA source into device code without torch and host code without kernels.

``load_inline`` compiles ``cuda.cu`` (torch's three header lines, then the CUDA sources) with nvcc, which parses the
torch headers three times (device front end, host front end, g++ on the host half): ~30 s before any kernel code on
the 2-core CI machine. Almost every KernelBench candidate is kernels on plain pointers plus a launcher that takes
``torch::Tensor`` s. :func:`split_cuda` separates the two at the top level of the source:

* ``device``: the kernels, ``__device__`` functions and variables, and the torch-free declarations they can use
  (types, constants, macros, includes other than torch's), plus one launch shim per kernel,
  ``void musaenv_launch_<k>(dim3, dim3, size_t, cudaStream_t, <k's parameters>)`` that launches it with
  ``<<<...>>>``. nvcc compiles it without a torch header: about a second. A template kernel (type and integral
  non-type parameters) gets a template shim, explicitly instantiated for exactly the arguments its launches use
  (``k<float, 256>``; ``k<scalar_t>`` inside ``AT_DISPATCH_FLOATING_TYPES``: double, float; in a host template, as
  that template's calls instantiate it: :mod:`musaenv.toolchains.cuda.templates`). ``extern "C"`` declarations and
  blocks are placed as the same code without it and carried as written (:mod:`musaenv.toolchains.cuda.chunks`).
* ``host``: everything that is not device code, in the original order, with each ``k<<<g, b[, s[, st]]>>>(args)``
  replaced by a call to ``k``'s shim (declared where ``k`` was defined, so a launch before the kernel is declared
  still fails). g++ compiles it like a C++ candidate (torch's flags, a precompiled ``torch/types.h``).

The split is conservative: anything it cannot place for certain (conditional compilation, namespaces, template
arguments it cannot read, kernel names used other than in a launch, torch types in device code, ...) returns
``None`` and the caller builds the source as written. A split says "this builds", or that a kernel's own error is
the verdict where torch's headers could not explain it (:mod:`musaenv.toolchains.cuda.fast`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from musaenv.toolchains.cuda.chunks import Chunk as _Chunk
from musaenv.toolchains.cuda.chunks import blank as _blank
from musaenv.toolchains.cuda.chunks import chunks as _chunks
from musaenv.toolchains.cuda.chunks import with_linkage
from musaenv.toolchains.cuda.templates import (
    HostTemplates,
    TemplateParams,
    instances,
    launch_instances,
    literal_macros,
    template_head,
)

__all__ = ["DEVICE_FILE", "DEVICE_ORIGIN", "DEVICE_PRELUDE", "CudaSplit", "split_cuda"]

# Standard headers torch/types.h includes (transitively) before any candidate code: device code that relied on
# them still finds them. Each is a header the unsplit unit also sees, so adding them cannot make code build that
# would not build as written.
DEVICE_PRELUDE = (
    "#include <cuda.h>",
    "#include <cuda_runtime.h>",
    "#include <cuda_fp16.h>",  # c10/util/Half.h includes it under nvcc, BFloat16.h the next one
    "#include <cuda_bf16.h>",
    *(f"#include <{h}>" for h in ("cstdint", "cstddef", "cmath", "cfloat", "climits", "cstdio", "cstdlib", "cstring")),
    *(f"#include <{h}>" for h in ("cassert", "algorithm", "array", "limits", "type_traits", "utility", "vector")),
)
DEVICE_FILE = "musaenv_device.cu"  # the device unit's file name
DEVICE_ORIGIN = "cuda.cu"  # where its candidate lines come from: load_inline's name, as the unsplit check reports
_TORCH_INCLUDE = re.compile(r'#\s*include\s*[<"](torch|ATen|c10|pybind11|Python\.h|caffe2)')
_TORCH_WORD = re.compile(
    r"\b(torch|at|c10|caffe2|pybind11|py)::|\b(Tensor|TORCH_\w+|AT_\w+|C10_\w+|THC\w*)\b"
    r"|\bnamespace\s+(torch|at|c10|caffe2|pybind11)\b"
)
_DEVICE_WORD = re.compile(r"\b(__global__|__device__|__constant__|__shared__|__managed__)\b")
_UNSUPPORTED = re.compile(
    r"\b(__managed__|asm|__CUDA_ARCH__|__CUDACC\w*__|__NVCC__)\b|R\"|\bnamespace\s*\w*\s*[{=]"
    r"|#\s*(define|undef)\s+(AT_DISPATCH\w*|scalar_t)\b"  # what template instances are read from (.templates)
)
_TYPE_DEF = re.compile(r"\s*(template\s*<[^{]*>\s*)?(struct|class|union|enum|typedef|using)\b")
_CONDITIONAL = re.compile(r"#\s*(if|ifdef|ifndef|elif|else|endif|error|line)\b")
_KERNEL_HEAD = re.compile(r"(\w+)\s*\($")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TYPE_WORDS = {"const", "volatile", "unsigned", "signed", "int", "float", "double", "char", "long", "short", "bool",
               "void", "size_t", "__restrict__", "__restrict", "struct", "__grid_constant__"}  # fmt: skip
_FLAG_UNSAFE = re.compile(r"^(-rdc|--relocatable-device-code|-dc$|--device-c|-Werror|-x$|--x)|Werror")


@dataclass(frozen=True)
class CudaSplit:
    """The two translation units of a split CUDA source.

    Attributes:
        device: The ``.cu`` unit nvcc compiles: device code, shared declarations, launch shims; no torch header.
        host: The C++ unit g++ compiles: load_inline's header lines, host code with launches through the shims.
        kernels: Names of the kernels that got a shim, in source order.
    """

    device: str
    host: str
    kernels: tuple[str, ...]


def flags_allow_split(extra_cuda_cflags: list[str] | tuple[str, ...]) -> bool:
    """False for nvcc flags that change how units link or warn (relocatable device code, ``-Werror``)."""
    return not any(_FLAG_UNSAFE.search(f) for f in extra_cuda_cflags)


@dataclass
class _Kernel:
    name: str
    params: str
    names: list[str]
    tparams: TemplateParams | None = None  # a template kernel's parameters (:mod:`musaenv.toolchains.cuda.templates`)
    uses: set[tuple[str, ...]] = field(default_factory=set)  # the template arguments its launches instantiate


def _kernel(chunk: _Chunk) -> _Kernel | None:
    """Name and parameters of a ``__global__`` function definition or declaration; a template only of type and
    integral non-type parameters (:func:`~musaenv.toolchains.cuda.templates.template_head`)."""
    code = chunk.code
    template = template_head(code)
    if template is None:
        return None
    code = " " * template[0] + code[template[0] :]
    tparams = template[1]
    body = code.find("{")
    head = code[: body if body >= 0 else len(code)].rstrip().rstrip(";").rstrip()
    if re.match(r"\s*template\b", code) or not head.endswith(")"):
        return None
    depth, j = 0, len(head) - 1
    while j >= 0:
        depth += {")": 1, "(": -1}.get(head[j], 0)
        if depth == 0:
            break
        j -= 1
    m = _KERNEL_HEAD.search(head[: j + 1])
    if j < 0 or not m:
        return None
    params = " ".join(code[j + 1 : len(head) - 1].split())  # comments blanked: the shim is one line
    names = _param_names(code[j + 1 : len(head) - 1])
    if names is None:
        return None
    return _Kernel(m.group(1), "" if params == "void" else params, names, tparams)


def _param_names(params: str) -> list[str] | None:
    if not params.strip() or params.strip() == "void":
        return []
    if re.search(r"[<(=]", params):  # templates, function pointers, defaults: spell nothing for certain
        return None
    names = []
    for p in params.split(","):
        words = _IDENT.findall(p.split("[")[0])
        if len(words) < 2 or words[-1] in _TYPE_WORDS:
            return None  # an unnamed parameter
        names.append(words[-1])
    return names


def _split_top(args: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for c in args:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    return [*parts, cur]


def _rewrite_launches(
    text: str, code: str, kernels: dict[str, _Kernel], macros: dict[str, str | None], hosts: HostTemplates | None = None
) -> str | None:
    """Replace ``k<<<cfg>>>(args)`` by ``musaenv_launch_k(cfg..., args)``; None when a launch is unreadable. A
    template kernel's instances are noted in ``kernels``, or for a launch in a host template in ``hosts``."""
    out, pos = [], 0
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(?:<([^<>;{}()]*)>)?\s*<<<", code):
        if m.start() < pos:
            continue
        name, targ = m.group(1), " ".join((m.group(2) or "").split())
        end_cfg = code.find(">>>", m.end())
        if name not in kernels or end_cfg < 0 or bool(targ) != bool(kernels[name].tparams):
            return None  # not a kernel of this source, or a template's arguments left to deduction
        tparams = kernels[name].tparams
        if tparams is not None and code.lstrip().startswith("template"):  # instantiated as the host template is
            if hosts is None or not hosts.launch(code, name, targ, m.start()):
                return None
        elif tparams is not None:
            uses = launch_instances(targ, tparams, code, m.start(), macros)
            if uses is None:
                return None
            kernels[name].uses.update(uses)
        paren = re.compile(r"\s*\(").match(code, end_cfg + 3)
        if not paren:
            return None
        depth, j = 0, paren.end() - 1
        while j < len(code):
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            if depth == 0:
                break
            j += 1
        cfg = _split_top(text[m.end() : end_cfg])
        if not 2 <= len(cfg) <= 4 or j >= len(code):
            return None
        cfg += ["0"] * (4 - len(cfg))
        args = text[paren.end() : j].strip()
        call = f"musaenv_launch_{name}{f'<{targ}>' if targ else ''}({', '.join(c.strip() for c in cfg)}"
        call += f"{', ' + args if args else ''})"
        out += [text[pos : m.start()], call]
        pos = j + 1
    return "".join([*out, text[pos:]])


def _shims(k: _Kernel) -> tuple[str, str]:
    """(host declaration, device definition) of kernel ``k``'s launch shim (a template of a template kernel)."""
    params = f", {k.params}" if k.params else ""
    template = k.tparams.head() if k.tparams else ""
    head = f"{template}void musaenv_launch_{k.name}(dim3 musaenv_g, dim3 musaenv_b, size_t musaenv_s, "
    head += "cudaStream_t musaenv_st"
    targs = f"<{', '.join(k.tparams.names)}>" if k.tparams else ""
    call = f"{k.name}{targs}<<<musaenv_g, musaenv_b, musaenv_s, musaenv_st>>>({', '.join(k.names)});"
    return f"{head}{params});", f"{head}{params}) {{ {call} }}"


def _place(chunk: _Chunk) -> str | None:
    """``device``, ``host`` or ``both`` for one top-level chunk; None when it cannot be placed for certain."""
    code = chunk.code
    if chunk.directive:
        if _CONDITIONAL.match(code.strip()) or re.match(r'#\s*include\s*"', code.strip()):
            return None
        return "host" if _TORCH_INCLUDE.match(chunk.text.strip()) else "both"
    device = bool(_DEVICE_WORD.search(code))
    torch = bool(_TORCH_WORD.search(code))
    if device and re.search(r"\b__host__\b", code) and not re.search(r"\b__global__\b", code) and not torch:
        return "both"  # callable from both sides: each unit has its copy (an ODR clash fails the link)
    if device:
        return None if torch or re.search(r"\b__host__\b", code) else "device"
    if torch:
        return "host"
    head = code.split("{", 1)[0]
    if re.match(r"\s*(template\s*<[^{]*>\s*)?(struct|class|union|enum|typedef|using)\b", code):
        return "both"  # types may be defined in every unit that uses them
    if re.search(r"\b(static|inline|constexpr)\b", head) or re.match(r"\s*const\b", head):
        return "both"  # internal linkage or inline: a copy in each unit is what C++ allows
    return "host"  # plain functions and variables have one definition


def split_cuda(source: str, prelude: tuple[str, ...]) -> CudaSplit | None:
    """Split ``cuda.cu`` (``prelude`` lines, then the candidate's CUDA sources) or say it cannot (``None``)."""
    code = _blank(source)
    if code is None or _UNSUPPORTED.search(code):
        return None
    chunks = with_linkage(_chunks(source, code) or [])
    if not chunks:
        return None
    device, host = _DeviceText(len(prelude)), list(prelude)
    kernels: dict[str, _Kernel] = {}
    device_names: set[str] = set()
    c_linkage: dict[str, str] = {}
    hosts = HostTemplates(literal_macros(code))
    for chunk in chunks:
        where = _place(chunk)
        if where is None or (chunk.linkage and where == "both" and not _TYPE_DEF.match(chunk.code)):
            return None  # C linkage only changes a name; a copy in each unit of a function or variable is no type
        if where in ("device", "both"):
            device.add(chunk.out, chunk.line)
        if where == "device":
            if not _add_device(chunk, kernels, device, host, c_linkage):
                return None
            device_names |= _defined_names(chunk.code)
            continue
        if where == "host":
            hosts.add_chunk(chunk.code)
        rewritten = (
            _rewrite_launches(chunk.text, chunk.code, kernels, hosts.macros, hosts) if where == "host" else chunk.text
        )
        if rewritten is None:
            return None
        host.append(f'extern "C" {{{rewritten}}}' if chunk.wrap else rewritten)
    host_text = "\n".join(host) + "\n"
    host_code = _blank(host_text) or ""
    used = set(_IDENT.findall(host_code))
    if device_names & used - {f"musaenv_launch_{k}" for k in kernels} or "<<<" in host_code:
        return None  # the host code names device code (a kernel's address, a __constant__ symbol, ...)
    from_hosts = hosts.instances({k.name: k.tparams for k in kernels.values() if k.tparams})
    if not kernels or from_hosts is None:
        return None
    for name, uses in from_hosts.items():
        kernels[name].uses |= uses
    for k in kernels.values():
        if k.tparams and k.uses:
            device.add(instances(k.name, k.tparams, k.params, k.uses))
    return CudaSplit(device.text(), host_text + "".join(f"{d}\n" for d in c_linkage.values()), tuple(kernels))


def _add_device(
    chunk: _Chunk, kernels: dict[str, _Kernel], device: _DeviceText, host: list[str], c_linkage: dict[str, str]
) -> bool:
    """Note a device chunk's kernel (its shim: defined in the device unit, declared in the host unit) and its C
    linkage; False when the split cannot spell it (a kernel overloaded or unreadable, a C-linkage variable)."""
    is_kernel = bool(re.search(r"\b__global__\b", chunk.code))
    k = _kernel(chunk) if is_kernel or chunk.linkage else None
    if chunk.linkage:
        if k is None or k.tparams:
            return False
        # The unsplit unit's headers may declare a function of this name (C's, Python's) that a C-linkage device
        # function clashes with there: the host unit, which has those headers, declares it with a return type of
        # its own, so any such function fails the host compile (and the source is built as written).
        c_linkage.setdefault(k.name, f'extern "C" struct musaenv_c_linkage* {k.name}({k.params});')
    if not is_kernel:
        return True
    if k is None or (k.name in kernels and (kernels[k.name].params, kernels[k.name].tparams) != (k.params, k.tparams)):
        return False  # an overload: one shim name cannot spell it
    if k.name not in kernels:
        kernels[k.name] = k
        decl, definition = _shims(k)
        device.add(definition)
        host.append(decl)
    return True


class _DeviceText:
    """The device unit, each of the candidate's chunks under a ``#line`` of its place in ``cuda.cu`` (nvcc's
    messages, ``__LINE__`` and ``__FILE__`` read as in the unsplit unit), musaenv's own lines under their own."""

    def __init__(self, prelude_lines: int) -> None:
        self.offset = prelude_lines  # cuda.cu is load_inline's header lines, then the sources
        self.parts = list(DEVICE_PRELUDE)
        self.lines = len(self.parts)  # lines so far (each part starts on a line of its own)
        self.ours = True

    def add(self, text: str, source_line: int | None = None) -> None:
        """Append ``text``: the candidate's, from ``source_line`` of its sources, or (``None``) musaenv's."""
        if source_line is not None:
            self._put(f'#line {self.offset + source_line} "{DEVICE_ORIGIN}"')
        elif not self.ours:
            self._put(f'#line {self.lines + 2} "{DEVICE_FILE}"')
        self._put(text)
        self.ours = source_line is None

    def _put(self, text: str) -> None:
        self.parts.append(text)
        self.lines += text.count("\n") + 1

    def text(self) -> str:
        return "\n".join(self.parts) + "\n"


def _defined_names(code: str) -> set[str]:
    """Identifiers a device chunk defines: the function name before its parameters, or the variable names."""
    head = code.split("{", 1)[0]
    m = re.search(r"(\w+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$", head.strip().rstrip(";"))
    if m and "(" in head:
        return {m.group(1)}
    return {w for w in _IDENT.findall(head.split("=")[0])[-1:]}
