"""Static checks of the CuPy candidate format (backend ``cupy``): the CuPy surface a candidate may use, and its
kernel sources scanned like every CUDA source.

A CuPy candidate builds its kernels with ``cupy.RawModule(code=...)`` / ``cupy.RawKernel(code, name)``, takes them
with ``get_function`` and launches them as ``kernel(grid, block, args)`` on torch tensors (passed directly, through
``__cuda_array_interface__``, or as ``cupy.from_dlpack(t)`` / ``cupy.asarray(t)`` views). That is all it may use of
CuPy. Everything else is the CuPy equivalent of something the other formats refuse:

* array math (``cupy.matmul``, ``cupy.sum``, ufuncs, ``ElementwiseKernel``, ``ReductionKernel``, ``cupy.fuse``):
  ``library_compute``, judged by the policy like torch compute. ``ElementwiseKernel`` and ``ReductionKernel`` do
  compile C snippets of the candidate, but CuPy writes the kernel around them (the indexing, the reduction tree,
  the launch configuration) and picks CUB for reductions where it can: the work is CuPy's, not the candidate's.
* ``cupy.linalg``, ``cupy.fft``, ``cupy.cuda.cublas``/``cudnn``/``cufft``/..., ``cupyx``: ``vendor_library``.
* streams and events (``cupy.cuda.Stream``, ``ExternalStream``, ``Event``): ``side_stream``. The harness launches
  every CuPy kernel on torch's current stream itself (:mod:`musaenv.worker.cupy_hook`), so a candidate never
  needs one, and work on another stream escapes the timing (HACKS T1).
* CUDA graphs: ``graph_replay``. Files (``cupy.load``, ``RawModule(path=...)``): ``file_access``.
* the runtime and driver APIs, devices, memory pools, allocators, ``cupy.cuda.compiler``, ``cupy_backends`` and
  CuPy's private modules: ``cuda_runtime_api`` (raw memcpy, device switches and module loading bypass everything
  the checks look at).

Each kernel source passes the checks CUDA sources of ``load_inline`` get (:func:`~.static_cpp.check_build`:
vendor libraries, ATen, system calls, files, includes, the CPython API), and its ``options`` are limited to what
changes code generation (:data:`NVRTC_OK_OPTIONS`). ``backend="nvcc"`` and ``jitify`` are refused: the format is
NVRTC through CuPy, compiled inside the worker.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from musaenv.verification import allowlists as al
from musaenv.verification.findings import ERROR, Finding
from musaenv.verification.static_cpp import check_build
from musaenv.verification.static_names import Symbols
from musaenv.verification.static_sources import RecoveredBuild, SourceText, _Evaluator, _Unresolved

__all__ = ["CUPY_KERNEL_CLASSES", "CUPY_OK", "CupyKernelSource", "cupy_findings", "find_cupy_kernels", "is_cupy"]

CUPY_ROOTS = ("cupy", "cupyx", "cupy_backends")
CUPY_KERNEL_CLASSES = frozenset({"cupy.RawModule", "cupy.RawKernel"})
_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "bool_", "intp", "uintp", "half", "single", "double")  # fmt: skip
#: Every CuPy name a candidate may use: the kernel classes, zero-copy views of torch tensors, scalar types. Not
#: ``cupy.ndarray`` (memory of CuPy's own pool, outside torch's allocator, which the poisoned repeat relies on).
CUPY_OK = frozenset(
    {"cupy", "cupy.RawModule", "cupy.RawKernel", "cupy.from_dlpack", "cupy.asarray", "cupy.dtype",
     *(f"cupy.{d}" for d in _DTYPES)}
)  # fmt: skip
#: CuPy name (or prefix) -> flag; any other ``cupy.*`` name is ``library_compute``.
CUPY_FLAGS: dict[str, str] = {
    **dict.fromkeys(("cupy.cuda.Stream", "cupy.cuda.ExternalStream", "cupy.cuda.get_current_stream",
                     "cupy.cuda.Event", "cupy.cuda.stream", "cupy.cuda.get_elapsed_time", "cupy.cuda.using_allocator"
                     ), "side_stream"),
    **dict.fromkeys(("cupy.cuda.graph", "cupy.cuda.Graph"), "graph_replay"),
    **dict.fromkeys(("cupy.linalg", "cupy.fft", "cupy.cublas", "cupy.cuda.cublas", "cupy.cuda.cudnn",
                     "cupy.cuda.cufft", "cupy.cuda.cusolver", "cupy.cuda.cusparse", "cupy.cuda.cutensor",
                     "cupy.cuda.thrust", "cupy.cuda.cub", "cupy.cuda.nccl", "cupyx"), "vendor_library"),
    **dict.fromkeys(("cupy.load", "cupy.save", "cupy.savez", "cupy.savez_compressed", "cupy.fromfile",
                     "cupy.loadtxt", "cupy.savetxt", "cupy.genfromtxt", "cupy.tofile"), "file_access"),
    **dict.fromkeys(("cupy.cuda", "cupy_backends", "cupy._", "cupy.get_default_memory_pool",
                     "cupy.get_default_pinned_memory_pool", "cupy.cuda.set_allocator", "cupy.cuda.Device",
                     "cupy.cuda.runtime", "cupy.cuda.driver", "cupy.cuda.compiler", "cupy.cuda.Module",
                     "cupy.cuda.memory", "cupy.cuda.MemoryPointer", "cupy.cuda.function", "cupy.cuda.nvrtc"),
                    "cuda_runtime_api"),
}  # fmt: skip
#: NVRTC options a candidate may pass (``options=``): code generation only. Architecture, include paths, the
#: precompiled-header and output options are the harness's.
NVRTC_OK_OPTIONS = re.compile(
    r"^(?:-std=c\+\+(?:11|14|17|20)|--std=c\+\+(?:11|14|17|20)|-use_fast_math|--use_fast_math|-lineinfo|"
    r"--generate-line-info|-D\w+(?:=\S*)?|-U\w+|--define-macro=\w+(?:=\S*)?|-maxrregcount=\d+|"
    r"--maxrregcount=\d+|--(?:ftz|prec-div|prec-sqrt|fmad)=(?:true|false)|-(?:ftz|prec-div|prec-sqrt|fmad)="
    r"(?:true|false)|--extra-device-vectorization|-extra-device-vectorization|--restrict|-restrict|-w|"
    r"--disable-warnings|--device-as-default-execution-space|-default-device|-dopt=(?:on|off))$"
)
_KWARGS_REFUSED = {"backend": "nvcc", "jitify": True}


def is_cupy(qualname: str | None) -> bool:
    """True for names under CuPy's packages (``cupy``, ``cupyx``, ``cupy_backends``)."""
    return bool(qualname) and str(qualname).split(".")[0] in CUPY_ROOTS


def cupy_flag(q: str) -> str | None:
    """Flag for using the CuPy name ``q`` in a CuPy candidate, ``None`` when it is part of the format."""
    if q in CUPY_OK:
        return None
    if any(q.startswith(f"{k}.") for k in CUPY_KERNEL_CLASSES):
        return None  # attributes of the kernel classes themselves
    best = max((k for k in CUPY_FLAGS if q == k or q.startswith(k if k.endswith("_") else k + ".")), key=len,
               default=None)  # fmt: skip
    return CUPY_FLAGS[best] if best is not None else "library_compute"


@dataclass
class CupyKernelSource:
    """One ``cupy.RawModule`` / ``cupy.RawKernel`` construction as far as it could be recovered.

    Attributes:
        line: Python line of the call.
        cls: ``RawModule`` or ``RawKernel``.
        codes: Every value the ``code`` argument can have.
        options: Every option of every value of ``options``.
        problems: Findings about the call itself (unresolved arguments, refused options and keywords).
    """

    line: int
    cls: str
    codes: list[SourceText] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)


def _argument(call: ast.Call, index: int, name: str) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def _values(ev: _Evaluator, node: ast.AST) -> list[object] | None:
    try:
        return list(ev.eval(node))
    except _Unresolved:
        return None


def _kernel_call(call: ast.Call, cls: str, ev: _Evaluator) -> CupyKernelSource:
    k = CupyKernelSource(call.lineno, cls)
    where = f"cupy.{cls} at line {call.lineno}"
    if any(kw.arg is None for kw in call.keywords):
        k.problems.append(Finding("unresolved_source", ERROR, f"{where}: **kwargs cannot be checked", call.lineno))
    if _argument(call, 99, "path") is not None:
        k.problems.append(Finding("file_access", ERROR, f"{where}: path= loads a binary from a file", call.lineno))
    code = _argument(call, 0, "code")
    codes = _values(ev, code) if code is not None else None
    if codes is None or not all(isinstance(c, str) for c in codes):
        msg = f"{where}: its code cannot be resolved statically; pass a string literal or a module-level constant"
        k.problems.append(Finding("unresolved_source", ERROR, msg, call.lineno))
    else:
        k.codes = [SourceText("cuda", str(c), getattr(code, "lineno", call.lineno)) for c in codes]
    opts = _argument(call, 2 if cls == "RawKernel" else 99, "options")
    values = _values(ev, opts) if opts is not None else [()]
    if values is None:
        k.problems.append(Finding("unresolved_source", ERROR, f"{where}: options cannot be resolved", call.lineno))
    for v in values or []:
        k.options.extend([v] if isinstance(v, str) else [str(o) for o in v] if isinstance(v, tuple) else [])
    for o in k.options:
        if not NVRTC_OK_OPTIONS.match(o):
            msg = f"{where}: NVRTC option {o!r} is outside the allow-list (code generation options only)"
            k.problems.append(Finding("build_flag_refused", ERROR, msg, call.lineno))
    for name, bad in _KWARGS_REFUSED.items():
        node = _argument(call, 3 if name == "backend" and cls == "RawKernel" else 99, name)
        got = _values(ev, node) if node is not None else []
        if got is None or bad in got:
            msg = f"{where}: {name}= must stay at its default (kernels are compiled by NVRTC in the worker)"
            k.problems.append(Finding("build_flag_refused", ERROR, msg, call.lineno))
    return k


def find_cupy_kernels(sym: Symbols) -> list[CupyKernelSource]:
    """Every ``cupy.RawModule`` / ``cupy.RawKernel`` construction in the candidate."""
    ev = _Evaluator(sym)
    out = []
    for node in sym.nodes:
        if isinstance(node, ast.Call) and (q := sym.resolve(node.func)) in CUPY_KERNEL_CLASSES:
            out.append(_kernel_call(node, str(q).split(".")[1], ev))
    return out


def _name_findings(sym: Symbols, policy: str) -> Iterator[Finding]:
    """Every CuPy name outside the format's surface (longest attribute chains only), policy-aware."""
    parents = {id(c): n for n in sym.nodes for c in ast.iter_child_nodes(n)}
    for node in sym.nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                f"{node.module}.{a.name}" for a in node.names if node.module and a.name != "*"]  # fmt: skip
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names) and is_cupy(node.module):
                names.append(f"{node.module}.*")
        elif isinstance(node, (ast.Name, ast.Attribute)):
            parent = parents.get(id(node))
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue
            q = sym.resolve(node)
            names = [q] if q else []
        else:
            continue
        for q in names:
            if not is_cupy(q) or q in ("cupy",):
                continue
            flag = cupy_flag(q) if not q.endswith(".*") else "dynamic_code"
            if flag is None:
                continue
            severity = al.policy_severity(flag, policy) if flag in al.POLICY_FLAGS else ERROR
            if severity is not None:
                line = getattr(node, "lineno", None)
                yield Finding(flag, severity, f"line {line}: {q} is outside the CuPy kernel format ({flag})", line)


def cupy_findings(sym: Symbols, policy: str, preprocess: bool = True) -> tuple[list[Finding], list[SourceText]]:
    """Findings of a CuPy candidate's CuPy use and kernel sources, and the kernel sources themselves."""
    out = list(_name_findings(sym, policy))
    sources: list[SourceText] = []
    for k in find_cupy_kernels(sym):
        out.extend(k.problems)
        defines = [o.replace("--define-macro=", "-D") for o in k.options if o.startswith(("-D", "-U", "--define"))]
        if k.codes:
            out.extend(check_build(RecoveredBuild(line=k.line, sources=k.codes, cflags=defines), policy, preprocess))
            sources.extend(k.codes)
    return out, sources
