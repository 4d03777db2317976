"""The link step of the compile-only check: link the objects as torch's ``load_inline`` would, and resolve them.

torch links a JIT extension as ``c++ <objects> -shared <extra_ldflags> -L<torch/lib> -lc10 [-lc10_cuda] -ltorch_cpu
[-ltorch_cuda] -ltorch -ltorch_python [-L<cuda>/lib64 -lcudart] -o <name>.so``
(``torch.utils.cpp_extension._prepare_ldflags``) and Python imports the result, which fails with ``undefined
symbol`` when a symbol the module needs is defined nowhere. Here the same link runs with ``-Wl,--no-undefined``
(and libpython, which the interpreter provides at import), so every unresolved symbol is named by the linker.

A CPU build of torch has no ``libc10_cuda``/``libtorch_cuda``, and this machine's toolkit may lack libraries a CUDA
build of torch loads globally (cuBLAS, cuDNN, ...) or the driver (``libcuda``). Their symbols are accepted as
stubs (:data:`STUBS`): unresolved references to them pass, and the check says so in its note. Everything else
unresolved (a declaration nobody defines, ``extern "C"`` against a C++ definition) fails the check, as the import
would fail in torch. The module must also export ``PyInit_<name>``, or Python refuses to import it.
"""

from __future__ import annotations

import re
import subprocess
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LinkPlan", "judge_link", "link_plan", "missing_module_init"]

# Library (present or not here) -> pattern of the symbols it defines, used only when the library is absent here.
STUBS: dict[str, re.Pattern[str]] = {
    "c10_cuda": re.compile(r"(^|[\s(<,*&])c10::(cuda|hip)::"),
    "torch_cuda": re.compile(r"(^|[\s(<,*&])(at|torch)::cuda::"),
    "cuda": re.compile(r"^cu[A-Z]\w*$"),  # the driver API (libcuda.so comes with the driver, not the toolkit)
    "cublas": re.compile(r"^cublas(?!Lt)\w*$"),
    "cublasLt": re.compile(r"^cublasLt\w*$"),
    "cudnn": re.compile(r"^cudnn\w*$"),
    "cusparse": re.compile(r"^cusparse\w*$"),
    "cusolver": re.compile(r"^cusolver\w*$"),
    "cufft": re.compile(r"^cufft\w*$"),
    "curand": re.compile(r"^curand\w*$"),
    "nccl": re.compile(r"^nccl\w*$"),
    "nvrtc": re.compile(r"^nvrtc\w*$"),
}
# A CUDA build of torch loads these globally (libtorch_global_deps, the nvidia wheels), so an extension that calls
# them resolves at import even without -l flags.
_GLOBAL_CUDA_LIBS = ("cublas", "cublasLt", "cudnn", "cusparse", "cusolver", "cufft", "curand", "nccl", "nvrtc")
_PYTHON_SYMBOL = re.compile(r"^_?Py\w+$")
_UNDEFINED = re.compile(r"(?:more )?undefined references? to [`']([^']+)'")
_CONTEXT = re.compile(r": in function [`']|collect2: error: ld returned|: warning: |^\s*$|: note: ")


@dataclass(frozen=True)
class LinkPlan:
    """The link command and what is accepted unresolved.

    Attributes:
        command: argv of the link.
        stubbed: Libraries whose symbols are accepted unresolved (absent here), in the order torch links them.
        notes: What differs from torch's own link, readable.
    """

    command: list[str]
    stubbed: tuple[str, ...]
    notes: tuple[str, ...]


def _library_present(name: str, dirs: Sequence[Path]) -> bool:
    return any((d / f"lib{name}.so").exists() for d in dirs) or _system_library(name)


def _system_library(name: str) -> bool:
    try:
        out = subprocess.run(
            ["c++", f"-print-file-name=lib{name}.so"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return out != f"lib{name}.so" and Path(out).exists()


def _python_library() -> list[str]:
    """``-L<dir> -lpythonX.Y`` when this interpreter has a shared libpython, else ``[]`` (Py* symbols stubbed)."""
    libdir, ldlib = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    if libdir and ldlib and str(ldlib).endswith(".so") and (Path(libdir) / ldlib).exists():
        return [f"-L{libdir}", f"-l{str(ldlib).removeprefix('lib').removesuffix('.so')}"]
    return []


def link_plan(
    cxx: str, objects: Sequence[str], with_cuda: bool, cuda_home: Path, extra_ldflags: Sequence[str], output: str
) -> LinkPlan:
    """torch's link of ``objects`` into ``output``, minus the libraries this machine lacks (stubbed instead)."""
    from torch.utils.cpp_extension import TORCH_LIB_PATH

    torch_lib = Path(TORCH_LIB_PATH)
    cuda_lib = cuda_home / "lib64" if (cuda_home / "lib64").exists() else cuda_home / "lib"
    libs = ["c10", *(["c10_cuda"] if with_cuda else []), "torch_cpu", *(["torch_cuda"] if with_cuda else [])]
    libs += ["torch", "torch_python"]
    dirs = [torch_lib, cuda_lib]
    stubbed = [lib for lib in libs if not _library_present(lib, [torch_lib])]
    flags: list[str] = []
    notes: list[str] = []
    for flag in extra_ldflags:
        name = flag[2:] if flag.startswith("-l") else None
        if name in STUBS and not _library_present(name, dirs):
            stubbed.append(name)
            notes.append(f"{flag} dropped: lib{name}.so is not on this machine (its symbols are accepted)")
        else:
            flags.append(flag)
    if with_cuda:
        stubbed += [lib for lib in _GLOBAL_CUDA_LIBS if lib not in stubbed and not _library_present(lib, dirs)]
    torch_flags = [f"-L{torch_lib}", *(f"-l{lib}" for lib in libs if lib not in stubbed)]
    cuda_flags = [f"-L{cuda_lib}", "-lcudart"] if with_cuda else []
    python = _python_library()
    if stubbed:
        notes.append(f"symbols of {', '.join(stubbed)} accepted unresolved (libraries absent here)")
    if not python:
        notes.append("no shared libpython here: Py* symbols accepted unresolved (the interpreter provides them)")
    command = [cxx, *objects, "-shared", *flags, *torch_flags, *cuda_flags, *python, "-Wl,--no-undefined"]
    return LinkPlan([*command, "-o", output], tuple(stubbed), tuple(notes))


def judge_link(returncode: int | None, output: str, plan: LinkPlan) -> tuple[bool, list[str]]:
    """``(ok, unresolved symbols)``: the link succeeded, or it failed only on references to stubbed libraries.

    Any other linker error (a symbol defined nowhere, a duplicate definition, a library not found) fails.
    """
    if returncode == 0:
        return True, []
    if returncode is None:
        return False, []
    accept = [STUBS[lib] for lib in plan.stubbed if lib in STUBS]
    python_stubbed = not any(a.startswith("-lpython") for a in plan.command)
    unresolved: list[str] = []
    other = False
    for line in output.splitlines():
        found = _UNDEFINED.findall(line)
        if found:
            unresolved += [s for s in found if s not in unresolved]
        elif not _CONTEXT.search(line):
            other = True
    missing = [
        s
        for s in unresolved
        if not any(p.search(s) for p in accept) and not (python_stubbed and _PYTHON_SYMBOL.match(s))
    ]
    return not other and not missing and bool(unresolved), missing


def missing_module_init(objects: Sequence[Path], module: str) -> bool:
    """True when no object defines ``PyInit_<module>``: Python would refuse to import the module
    (``dynamic module does not define module export function``), e.g. no ``functions`` and no ``PYBIND11_MODULE``."""
    try:
        out = subprocess.run(
            ["nm", "--defined-only", *map(str, objects)], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False  # cannot tell: the link itself already passed
    return not any(line.split()[-1:] == [f"PyInit_{module}"] for line in out.splitlines())
