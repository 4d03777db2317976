"""Judge a built extension by the symbols it imports: what its machine code can reach, whatever its source said.

The source checks (:mod:`musaenv.verification.static_cpp`) read text a candidate writes: a qualified name split
over a macro, a ``using namespace``, a header of another name or an ``extern "C"`` declaration reaches library compute
past them. The module the compiler made cannot hide what it calls in another library: every such call is an
undefined symbol of its dynamic table. :func:`binary_findings` reads them (``nm -D --undefined-only``, demangled
with ``c++filt``) and judges each:

* ``at::_ops::<op>::call`` is plumbing when ``<op>`` (read through torch's own schema list: ``add_Tensor`` is
  ``aten::add.Tensor``) is a plumbing op of :mod:`.allowlists`; any other op, any ``redispatch``, the kernels of a
  dispatch key called directly (``at::native::*``, ``at::cpu::relu``...) and the C entry points torch's libraries
  export (MKL and BLAS: :func:`~musaenv.verification.libtorch_symbols.exported_c_symbols`) are library compute
  (an error under ``strict``, a warning under ``kernelbench``/``permissive``, nothing under ``off``);
* under every policy: the dispatcher and operator registration (``c10::Dispatcher``, ``torch::Library``,
  ``TORCH_LIBRARY``), TorchScript, the profiler's switches, ``dlopen``/``dlsym``, page protections, mappings and
  signal handlers, processes, and the Python C API's reflection (frames, globals, imports, tracing, ``sys``).

The module's own instructions are read too (``objdump -d``): a system-call instruction there (``syscall``,
``sysenter``, ``int $0x80``, ``svc #0``) reaches the kernel past every imported symbol above (a page protection,
a fork, a file), however the source spelled it (``.byte 0x0f, 0x05`` passes the source check of
:mod:`~musaenv.verification.static_cpp`). Compilers never emit one for C++ or CUDA host code (none in the 290
extensions built on the development machine, honest and hostile, but the hostile ones that asked for it), so any
is ``raw_syscall``, an error under every policy.

A toolchain that links the C++ runtime statically puts the runtime's code, with its own imports (``open``,
``secure_getenv``, ``syscall``), into every module: those imports are excused only where every reference to them
is in a function that is the toolchain's own, and the runtime's judged functions linked in (``std::basic_filebuf::
open``) are judged where other code calls them (:mod:`.binary_runtime`).

What it does not see: calls through generic entry points every honest module imports (``PyObject_GetAttrString`` on
a Python object, pybind11's casters), and code that reaches a function by address arithmetic from a symbol it may
import. The runtime checks and the sandbox stay for those.
"""

from __future__ import annotations

import functools
import logging
import re
import subprocess
from pathlib import Path

from musaenv.verification.allowlists import (
    _ALLOC,
    CPP_TORCH_PLUMBING,
    TENSOR_META_METHODS,
    TENSOR_PLUMBING_METHODS,
    policy_severity,
)
from musaenv.verification.binary_runtime import runtime_calls, runtime_only_imports
from musaenv.verification.findings import Finding
from musaenv.verification.libtorch_symbols import aten_op_structs, exported_c_symbols

__all__ = ["binary_findings", "imported_symbols", "judge_symbol", "syscall_instructions"]

log = logging.getLogger(__name__)

# aten ops that are plumbing beyond the Python-level lists: what torch's own inline helpers call for a view, a cast,
# an allocation or a scalar read.
_ATEN_PLUMBING = frozenset(
    {
        "_to_copy", "_local_scalar_dense", "_reshape_alias", "alias", "slice", "sym_size", "sym_stride", "sym_numel",
        "sym_storage_offset", "_unsafe_view", "lift_fresh", "resolve_conj", "resolve_neg", "_copy_from",
        "_copy_from_and_resize", "expand", "contiguous", "empty", "empty_strided", "_empty_affine_quantized",
    }
)  # fmt: skip
# Python casts that are not aten op names, and would wrongly cover ops (``float_power``) if read as one.
_NOT_OPS = frozenset({"float", "half", "double", "bfloat16", "int", "long", "bool", "short", "char", "byte", "type"})
PLUMBING_OPS = (
    frozenset(_ALLOC) | TENSOR_PLUMBING_METHODS | TENSOR_META_METHODS | _ATEN_PLUMBING
    | {n for n in CPP_TORCH_PLUMBING if "::" not in n}
) - _NOT_OPS  # fmt: skip
# Namespaces of one dispatch key's kernels, callable past the dispatcher (ATen/ops/<op>_<key>_dispatch.h).
_KERNEL_NAMESPACES = ("cpu", "cuda", "meta", "musa", "mps", "compositeexplicitautograd",
                      "compositeexplicitautogradnonfunctional", "compositeimplicitautograd",
                      "compositeimplicitautogradnestedtensor")  # fmt: skip
_ALWAYS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(c10::Dispatcher|c10::impl::OperatorEntry|c10::OperatorHandle|c10::RegisterOperators|"
                r"c10::KernelFunction|c10::OperatorKernel|torch::Library|torch::detail::TorchLibraryInit|"
                r"torch::CppFunction|c10::impl::BoxedKernelWrapper|c10::BoxedKernel)\b"), "monkeypatch"),
    (re.compile(r"^torch::jit::"), "graph_replay"),
    (re.compile(r"^at::(enableRecordFunction|clearCallbacks|clearGlobalCallbacks|clearThreadLocalCallbacks|"
                r"addGlobalCallback|addThreadLocalCallback|removeCallback|disableCallback|reenableCallback|"
                r"RecordFunctionGuard|DisableRecordFunctionGuard|set_record_function_tls_)\b"), "profiler_tampering"),
    (re.compile(r"^(dlopen|dlmopen|dlsym|dlvsym|dladdr1?|dlinfo|dl_iterate_phdr|__libc_dlsym|__libc_dlopen_mode|"
                r"_dl_\w+)$"), "dynamic_code"),
    (re.compile(r"^(mprotect|pkey_mprotect|pkey_alloc|mmap|mmap64|mremap|munmap|madvise|posix_madvise|mlock|"
                r"userfaultfd|sigaction|__sigaction|signal|__sysv_signal|sysv_signal|bsd_signal|ssignal|sigset|"
                r"sigaltstack|sigprocmask|pthread_sigmask|sigsetjmp|siglongjmp|__sigsetjmp|setitimer|alarm|"
                r"timer_create|process_vm_readv|process_vm_writev)$"), "memory_or_signal"),
    (re.compile(r"^(syscall|fork|vfork|clone|clone3|__clone|execl|execlp|execle|execv|execvp|execvpe|execve|"
                r"fexecve|posix_spawnp?|system|popen|ptrace|prctl|pthread_create|pthread_kill|tgkill|kill)$"),
     "thread_or_process"),
    (re.compile(r"^(open|open64|openat|openat64|creat|creat64|fopen|fopen64|freopen|freopen64|fdopen|unlink|"
                r"unlinkat|rename|renameat2?|truncate|ftruncate|shm_open|memfd_create)$"), "file_access"),
    # libstdc++'s own way into files, which no C entry point above shows (it calls open(2) from inside the library).
    (re.compile(r"^std::(basic_filebuf::open|basic_[io]?fstream::\w+|__basic_file::(sys_)?open|"
                r"(experimental::)?filesystem::.+)$"), "file_access"),
    (re.compile(r"^(socket|connect|bind|listen|accept4?|getaddrinfo|gethostbyname\w*|sendto|recvfrom)$"), "network"),
    (re.compile(r"^(getenv|secure_getenv|setenv|putenv|unsetenv|clearenv|environ|__environ)$"), "introspection"),
    # The C API's reflection: frames, globals, imports, code, tracing and the interpreter's own state. (pybind11's
    # error formatting imports PyFrame_GetBack/GetCode/GetLineNumber in every honest module: not judged here.)
    (re.compile(r"^(PyEval_GetFrame\w*|PyEval_GetGlobals|PyEval_GetLocals|PyThreadState_GetFrame|PyFrame_GetLocals|"
                r"PyFrame_GetGlobals|PyFrame_GetBuiltins|PyFrame_FastToLocals\w*|PyFrame_LocalsToFast|"
                r"PyFrame_GetVar\w*|PyEval_SetProfile\w*|PyEval_SetTrace\w*|PySys_\w+|PyImport_\w+|PyRun_\w+|"
                r"Py_CompileString\w*|PyEval_EvalCode\w*|PyGC_\w+|PyCode_\w+|PyFunction_\w+|PyMarshal_\w+|"
                r"PyInterpreterState_(Head|Next|Main|ThreadHead)|PyThreadState_Next|PyThreadState_SetAsyncExc|"
                r"_PyEval_\w+|_PyFrame_\w+|_PyInterpreterFrame\w*|_PyImport_\w+|_PySys_\w+|_PyGC_\w+)$"),
     "introspection"),
)  # fmt: skip
_TEMPLATE_ARGS = re.compile(r"<[^<>()]*>")
_VENDOR = re.compile(
    r"^(?:cblas|mkl|MKL|dnnl|openblas|libxsmm|bli)_\w+$|^[sdcz](?:gemm|gemv|axpy|dot|syrk|trsm|scal)_?$"
)


@functools.lru_cache(maxsize=1)
def _op_name_set() -> frozenset[str]:
    """Every aten op name (the values of :func:`aten_op_structs`), for membership tests per symbol."""
    return frozenset(aten_op_structs().values())


def _plain_name(demangled: str) -> str:
    """The qualified name of a demangled symbol, without return type, arguments, template arguments or version."""
    text = demangled.split("@", 1)[0].strip()
    for prefix in ("vtable for ", "typeinfo for ", "typeinfo name for ", "VTT for ", "guard variable for ",
                   "construction vtable for ", "non-virtual thunk to ", "virtual thunk to "):  # fmt: skip
        if text.startswith(prefix):
            text = text[len(prefix) :]
    while True:  # template arguments, innermost first
        shorter = _TEMPLATE_ARGS.sub("", text)
        if shorter == text:
            break
        text = shorter
    text = text.replace("operator()", "operator<call>").split("(", 1)[0].replace("operator<call>", "operator()")
    return text.strip().rsplit(" ", 1)[-1].lstrip("*&")


def judge_symbol(name: str) -> tuple[str, bool] | None:
    """``(flag, policy_dependent)`` for an imported symbol's plain name (see :func:`_plain_name`), or ``None``."""
    for pattern, flag in _ALWAYS:
        if pattern.match(name):
            return flag, False
    parts = name.split("::")
    if parts[0] == "at" and len(parts) >= 3 and parts[1] == "_ops":
        if parts[-1] == "redispatch":
            return "library_compute", True
        op = aten_op_structs().get(parts[2], parts[2])
        return None if op in PLUMBING_OPS or op.rstrip("_") in PLUMBING_OPS else ("library_compute", True)
    if parts[0] == "at" and len(parts) >= 2 and parts[1] == "native":
        return "library_compute", True
    if parts[0] == "at" and len(parts) == 3 and parts[1] in _KERNEL_NAMESPACES:
        op = parts[2]
        if op in _op_name_set() and op not in PLUMBING_OPS:
            return "library_compute", True
        return None
    if len(parts) == 1 and (_VENDOR.match(name) or name in exported_c_symbols()):
        return "vendor_library", True
    return None


def imported_symbols(so_path: Path) -> list[str]:
    """The undefined dynamic symbols of ``so_path``, demangled (``c++filt``), in the order ``nm`` lists them.

    Raises:
        OSError: ``nm`` or ``c++filt`` missing or failing.
    """
    nm = subprocess.run(["nm", "-D", "--undefined-only", "-P", str(so_path)], capture_output=True, text=True,
                        timeout=60)  # fmt: skip
    if nm.returncode != 0:
        raise OSError(f"nm failed on {so_path.name}: {nm.stderr.strip()[:300]}")
    raw = [line.split()[0] for line in nm.stdout.splitlines() if line.split()]
    filt = subprocess.run(["c++filt"], input="\n".join(raw), capture_output=True, text=True, timeout=60)
    if filt.returncode != 0:
        raise OSError(f"c++filt failed: {filt.stderr.strip()[:300]}")
    return filt.stdout.splitlines()


# objdump's line for one instruction: "  <address>:<tab><mnemonic> <operands>" (raw bytes left out).
_SYSCALL_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(syscall|sysenter|int\s+\$0x80|svc\s+#?0(?:x0)?)\s*$", re.MULTILINE)


def syscall_instructions(so_path: Path) -> list[str]:
    """The system-call instructions in ``so_path``'s executable sections, as ``"<address>: <instruction>"``.

    Raises:
        OSError: ``objdump`` missing or failing.
    """
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so_path)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    if dis.returncode != 0:
        raise OSError(f"objdump failed on {so_path.name}: {dis.stderr.strip()[:300]}")
    return [f"{m.group(0).split(':')[0].strip()}: {m.group(1)}" for m in _SYSCALL_INSN.finditer(dis.stdout)]


@functools.lru_cache(maxsize=256)
def _judged(so_path: str, size: int, mtime_ns: int) -> tuple[tuple[str, bool, str], ...]:
    found: dict[str, tuple[str, bool, str]] = {}
    for sym in imported_symbols(Path(so_path)):
        name = _plain_name(sym)
        verdict = judge_symbol(name)
        if verdict is not None:
            found.setdefault(name, (verdict[0], verdict[1], f"imports {name}"))
    c_names = [n for n in found if "::" not in n]
    if c_names:  # a statically linked C++ runtime brings its own imports (musaenv.verification.binary_runtime)
        try:
            for name in runtime_only_imports(Path(so_path), c_names):
                log.debug("%s: %s is imported by the static C++ runtime's own code only", so_path, name)
                del found[name]
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("the static runtime's imports of %s could not be told apart: %s", so_path, e)
    try:  # a static runtime's judged functions (std::basic_filebuf::open) are defined inside, not imported
        for name, (flag, dependent) in runtime_calls(Path(so_path), lambda d: judge_symbol(_plain_name(d))).items():
            plain = _plain_name(name)
            found.setdefault(plain, (flag, dependent, f"calls {plain} (linked into it from the C++ runtime)"))
    except (OSError, subprocess.SubprocessError) as e:
        raise OSError(f"the C++ runtime inside {Path(so_path).name} could not be read: {e}") from None
    for insn in syscall_instructions(Path(so_path)):
        found.setdefault(insn, ("raw_syscall", False, f"makes a system call itself ({insn})"))
    return tuple(found.values())


def binary_findings(so_path: Path, policy: str) -> list[Finding]:
    """Findings for the library functions the built module ``so_path`` imports, under ``policy``.

    Library compute takes the policy's severity (:func:`~musaenv.verification.allowlists.policy_severity`); the
    rest are errors under every policy. One finding per flag, naming up to five of its symbols.

    Raises:
        OSError: the module or the binutils to read it are missing (the harness's fault, never the candidate's).
    """
    st = so_path.stat()
    by_flag: dict[tuple[str, str], list[str]] = {}
    for flag, dependent, name in _judged(str(so_path), st.st_size, st.st_mtime_ns):
        severity = policy_severity(flag, policy) if dependent else "error"
        if severity is not None:
            by_flag.setdefault((flag, severity), []).append(name)
    return [
        Finding(flag, severity, f"the built module {'; '.join(names[:5])}" + (" ..." if len(names) > 5 else ""))
        for (flag, severity), names in by_flag.items()
    ]
