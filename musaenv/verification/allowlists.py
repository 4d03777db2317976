"""Tables the static checks consult: what is tensor plumbing, what is compute, what is banned.

The strict policy follows the MusaCoder allowlist (REFERENCES.md, "MooreEval"): only tensor creation and plumbing
may run as aten ops in ``ModelNew.forward``; everything else under aten is forbidden compute. The bans on dynamic
code, processes, network, files, monkeypatching, side streams and graph replay come from HACKS.md (S20-S23, T1-T8).

Decisions documented here:

* Imports outside :data:`ALLOWED_IMPORTS` are ``banned_import`` errors: a candidate only needs torch, Triton and a
  few harmless standard modules, and any other library is either a way around the kernel (scipy, jax, cupy) or a
  way out of the sandbox. Modules with a specific risk get that risk's flag instead (``ctypes`` is ``dynamic_code``).
  The CuPy candidate format (backend ``cupy``) may import CuPy, limited to its kernel surface
  (:mod:`musaenv.verification.static_cupy`).
* ``numpy`` may be imported, but numpy calls reachable from ``forward`` count as library compute.
* ``functools.lru_cache``/``cache`` on a reachable function that takes arguments is ``output_cache`` (S11); on a
  zero-argument function (the usual lazy extension loader) it is fine.
* CUB block/warp primitives are building blocks of a hand-written kernel and pass; CUB device-wide algorithms,
  Thrust algorithms, CUTLASS/CuTe, cuBLAS(Lt), cuDNN, muBLAS, muDNN, MKL, oneDNN, (C)BLAS and Eigen are
  ``vendor_library``: an error under the strict policy, a warning under the permissive one.
* Inline ``asm`` is a warning: PTX inline assembly is common in honest fast kernels.

Size: data: the per-policy allow-lists of torch ops and C++ names, tables rather than logic.
"""
# Kept whole (~465 lines): tables of names and their lookups, no other logic; one list per policy reads better
# than a split by size.

from __future__ import annotations

import re

from musaenv.verification.rules import CONTRACT, LIBRARY, by_layer, severity

__all__ = [
    "ALLOWED_IMPORTS",
    "ATEN_COMPUTE_NAMES",
    "BANNED_MODULES",
    "BANNED_QUALNAMES",
    "INTROSPECTION_ATTRS",
    "NN_MODULE_READ_METHODS",
    "POLICY_FLAGS",
    "TENSOR_META_ATTRS",
    "TENSOR_META_METHODS",
    "TENSOR_PLUMBING_METHODS",
    "TORCH_META_FUNCS",
    "TORCH_PLUMBING_FUNCS",
    "is_compute_name",
    "is_torch_value_ok",
    "policy_severity",
]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# --- policies --------------------------------------------------------------------------------------------------

#: Flags whose severity depends on the policy: strict -> error, kernelbench and permissive -> warning, off -> not
#: reported (views of :data:`musaenv.verification.rules.RULES`).
POLICY_FLAGS = frozenset(r.name for r in by_layer("static", "binary") if r.severity == LIBRARY)
#: Flags that are errors under strict, kernelbench and permissive, and not checked under off.
KERNEL_CONTRACT_FLAGS = frozenset(r.name for r in by_layer("static", "binary") if r.severity == CONTRACT)


def policy_severity(flag: str, policy: str) -> str | None:
    """Severity of ``flag`` under ``policy`` (the rule table's); ``None`` means "do not report"."""
    if flag in POLICY_FLAGS or flag in KERNEL_CONTRACT_FLAGS:
        return severity(flag, policy)
    return "error"


# --- Python imports --------------------------------------------------------------------------------------------

ALLOWED_IMPORTS = frozenset(
    {
        "__future__", "abc", "collections", "contextlib", "dataclasses", "enum", "functools", "itertools",
        "logging", "math", "numbers", "numpy", "os", "sys", "textwrap", "time", "torch", "torch_musa", "triton",
        "typing", "typing_extensions", "warnings",
    }
)  # fmt: skip

#: Module (or module prefix) -> flag, for imports and for any reference anywhere in the file.
BANNED_MODULES: dict[str, str] = {
    **dict.fromkeys(
        ("importlib", "imp", "ctypes", "cffi", "marshal", "pickle", "dill", "cloudpickle", "shelve", "copyreg",
         "base64", "binascii", "codecs", "zlib", "bz2", "lzma", "types", "runpy", "code", "codeop", "builtins",
         "pkgutil", "zipimport", "pydoc"),
        "dynamic_code",
    ),
    **dict.fromkeys(
        ("threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "pty", "signal",
         "sched", "resource", "torch.multiprocessing"),
        "process_or_thread",
    ),
    **dict.fromkeys(
        ("socket", "ssl", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp", "ftplib", "smtplib",
         "telnetlib", "xmlrpc", "websocket", "websockets", "torch.hub", "torch.distributed"),
        "network",
    ),
    **dict.fromkeys(("gc", "inspect", "traceback", "tracemalloc", "faulthandler", "dis"), "introspection"),
    **dict.fromkeys(
        ("io", "pathlib", "shutil", "tempfile", "glob", "mmap", "sqlite3", "fileinput", "zipfile", "tarfile"),
        "file_access",
    ),
    "musaenv": "harness_access",
}  # fmt: skip

#: Fully qualified name (or prefix) -> flag. Bare builtins resolve to ``builtins.<name>``.
BANNED_QUALNAMES: dict[str, str] = {
    **dict.fromkeys(
        ("builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__", "builtins.__builtins__",
         "builtins.breakpoint", "sys.modules", "sys.meta_path", "sys.path_hooks", "torch.ops.load_library",
         "torch.classes.load_library", "torch.utils.cpp_extension.load_library", "torch.package"),
        "dynamic_code",
    ),
    **dict.fromkeys(
        ("builtins.globals", "builtins.locals", "builtins.vars", "sys._getframe", "sys.settrace", "sys.setprofile",
         "sys.gettrace", "sys.getprofile", "sys.argv", "sys.orig_argv", "sys.exc_info", "sys.exception",
         "sys.last_traceback", "sys.setrecursionlimit", "sys.addaudithook", "os.environ", "os.environb",
         "os.getenv", "os.putenv", "os.unsetenv"),
        "introspection",
    ),
    **dict.fromkeys(
        ("os.system", "os.popen", "os.fork", "os.forkpty", "os.exec", "os.spawn", "os.posix_spawn", "os.kill",
         "os.killpg", "os._exit", "os.wait", "os.abort", "sys.exit", "builtins.exit", "builtins.quit"),
        "process_or_thread",
    ),
    **dict.fromkeys(
        ("builtins.open", "os.open", "os.remove", "os.unlink", "os.rmdir", "os.removedirs", "os.rename",
         "os.renames", "os.replace", "os.mkdir", "os.makedirs", "os.listdir", "os.scandir", "os.walk", "os.chdir",
         "os.chmod", "os.chown", "os.link", "os.symlink", "os.truncate", "os.stat", "os.lstat", "os.mkfifo",
         "os.fdopen", "os.write", "os.read", "os.pipe", "os.dup", "os.path.exists", "os.path.isfile",
         "os.path.isdir", "os.path.getsize", "os.path.getmtime", "os.path.lexists", "os.path.islink",
         "torch.load", "torch.save", "torch.from_file", "numpy.load", "numpy.save", "numpy.savez",
         "numpy.savez_compressed", "numpy.fromfile", "numpy.loadtxt", "numpy.savetxt", "numpy.genfromtxt",
         "numpy.memmap", "numpy.lib"),
        "file_access",
    ),
    **dict.fromkeys(
        ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.StreamContext", "torch.cuda.ExternalStream",
         "torch.cuda.set_stream", "torch.cuda.Event", "torch.cuda.streams", "torch.Stream", "torch.Event",
         "torch.musa.Stream", "torch.musa.stream", "torch.musa.Event", "torch.musa.set_stream",
         "torch_musa.Stream", "torch_musa.stream", "torch_musa.Event", "torch.cpu.Stream", "torch.cpu.stream"),
        "side_stream",
    ),
    **dict.fromkeys(
        ("torch.compile", "torch.jit", "torch._dynamo", "torch._inductor", "torch.export", "torch.fx",
         "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
         "torch.musa.graph", "torch.musa.MUSAGraph", "torch.musa.make_graphed_callables"),
        "graph_replay",
    ),
    **dict.fromkeys(
        ("torch.manual_seed", "torch.seed", "torch.set_rng_state", "torch.random", "torch.cuda.manual_seed",
         "torch.cuda.manual_seed_all", "torch.cuda.set_rng_state", "torch.cuda.seed", "torch.musa.manual_seed",
         "numpy.random.seed", "torch.set_num_threads", "torch.set_num_interop_threads", "torch.set_default_dtype",
         "torch.set_default_device", "torch.set_default_tensor_type", "torch.set_float32_matmul_precision",
         "torch.set_flush_denormal", "torch.use_deterministic_algorithms", "torch.backends",
         "torch.cuda.set_per_process_memory_fraction", "torch.autograd.set_detect_anomaly",
         "torch.set_anomaly_enabled", "torch.cuda.matmul", "torch.set_warn_always"),
        "global_state",
    ),
    **dict.fromkeys(
        ("torch.library", "torch.overrides", "torch.utils._python_dispatch", "torch.Tensor._make_subclass",
         "torch.Tensor.as_subclass", "torch._C._TensorBase", "torch.Tensor.__torch_function__",
         "torch.Tensor.__torch_dispatch__"),
        "monkeypatch",
    ),
    "torch.utils.cpp_extension.load": "unresolved_source",
    "torch.utils.cpp_extension.CppExtension": "unresolved_source",
    "torch.utils.cpp_extension.CUDAExtension": "unresolved_source",
    "torch.utils.cpp_extension.BuildExtension": "unresolved_source",
}  # fmt: skip

#: Private torch names that are still fine to use.
PRIVATE_TORCH_OK = frozenset({"torch._assert"})

#: Attribute names that reach frames, globals or class internals (S20-S23).
INTROSPECTION_ATTRS = frozenset(
    {
        "f_back", "f_globals", "f_locals", "f_code", "f_builtins", "f_trace", "tb_frame", "tb_next", "gi_frame",
        "cr_frame", "ag_frame", "gi_code", "__globals__", "__code__", "__closure__", "__subclasses__", "__dict__",
        "__builtins__", "__getattribute__", "__bases__", "__base__", "__mro__", "__defaults__", "__kwdefaults__",
        "__loader__", "__spec__", "__reduce__", "__reduce_ex__", "__setstate__", "co_code", "co_consts",
        "__set_name__", "__init_subclass__",
    }
)  # fmt: skip

# --- torch in Python -------------------------------------------------------------------------------------------

_ALLOC = (
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "tensor", "as_tensor",
    "from_numpy", "as_strided", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "t",
    "broadcast_to", "select", "narrow", "chunk", "split", "unbind", "clone", "view_as_real", "view_as_complex",
    "movedim", "swapaxes", "swapdims",
)  # fmt: skip
#: Torch functions allowed in reachable code that return tensors.
TORCH_PLUMBING_FUNCS = frozenset(
    {f"torch.{n}" for n in _ALLOC}
    | {
        "torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.no_grad",
        "torch.inference_mode", "torch.enable_grad", "torch.set_grad_enabled", "torch.autocast",
        "torch.cuda.device", "torch.musa.device", "torch.device", "torch.Size", "torch._assert",
        "torch.testing.assert_close", "torch.utils.cpp_extension.load_inline", "torch.Generator",
        "torch.from_dlpack", "torch.utils.dlpack.from_dlpack",  # zero-copy views (of CuPy arrays)
    }
)  # fmt: skip
#: Torch functions allowed in reachable code that return non-tensors (flags, sizes, streams, devices).
TORCH_META_FUNCS = frozenset(
    {
        "torch.allclose", "torch.equal", "torch.is_tensor", "torch.is_floating_point", "torch.is_complex",
        "torch.numel", "torch.finfo", "torch.iinfo", "torch.get_default_dtype", "torch.promote_types",
        "torch.result_type", "torch.can_cast", "torch.is_grad_enabled", "torch.is_inference_mode_enabled",
        "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.current_device",
        "torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.get_device_properties",
        "torch.cuda.get_device_capability", "torch.cuda.get_device_name", "torch.cuda.synchronize",
        "torch.cuda.is_initialized", "torch.musa.current_stream", "torch.musa.default_stream",
        "torch.musa.current_device", "torch.musa.is_available", "torch.musa.device_count",
        "torch.musa.synchronize", "torch.musa.get_device_properties", "torch.cpu.current_stream",
        "torch.get_num_threads", "torch.Tensor", "torch.is_nonzero",
    }
)  # fmt: skip

#: Values that may be referenced (not called) in reachable code.
_TORCH_VALUE_NAMES = frozenset(
    {
        "torch", "torch.nn", "torch.Tensor", "torch.Size", "torch.device", "torch.dtype", "torch.strided",
        "torch.sparse_coo", "torch.contiguous_format", "torch.channels_last", "torch.channels_last_3d",
        "torch.preserve_format", "torch.layout", "torch.memory_format", "torch.nn.Module", "torch.cuda",
        "torch.musa", "torch.version", "torch.__version__", "torch.version.cuda", "torch.version.hip",
    }
)  # fmt: skip
_DTYPE_RE = re.compile(
    r"torch\.(?:float\d*|bfloat16|half|double|int\d*|uint\d*|long|short|bool|complex\d*|cfloat|cdouble|chalf|"
    r"qint\d+|quint\w+|float8_\w+|bits\w+)$"
)


def is_torch_value_ok(qualname: str) -> bool:
    """True when ``qualname`` may be referenced as a value (a dtype, ``torch.Size``, a memory format, ...)."""
    return (
        qualname in _TORCH_VALUE_NAMES
        or qualname in TORCH_PLUMBING_FUNCS
        or qualname in TORCH_META_FUNCS
        or bool(_DTYPE_RE.match(qualname))
    )


#: Tensor methods that are plumbing and return tensors (views, copies, casts, fills).
TENSOR_PLUMBING_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "squeeze_", "unsqueeze",
        "unsqueeze_", "permute", "transpose", "transpose_", "t", "t_", "expand", "expand_as", "broadcast_to",
        "as_strided", "select", "narrow", "chunk", "split", "unbind", "movedim", "swapaxes", "contiguous",
        "clone", "copy_", "to", "type", "type_as", "float", "half", "double", "bfloat16", "int", "long", "bool",
        "short", "char", "byte", "cpu", "cuda", "musa", "detach", "detach_", "requires_grad_", "fill_", "zero_",
        "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor", "resize_",
        "resize_as_", "pin_memory", "view_as_real", "numpy", "untyped_storage", "storage", "set_", "share_memory_",
        "record_stream", "__getitem__", "__setitem__",
    }
)  # fmt: skip
#: Tensor methods that are plumbing and return non-tensors.
TENSOR_META_METHODS = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "item", "tolist", "data_ptr",
        "element_size", "is_contiguous", "is_floating_point", "is_complex", "get_device", "allclose", "equal",
        "is_pinned", "is_shared", "is_set_to", "nbytes", "itemsize", "__len__",
    }
)  # fmt: skip
#: Tensor attributes that are metadata.
TENSOR_META_ATTRS = frozenset(
    {
        "shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "is_musa", "layout", "requires_grad", "is_leaf",
        "nbytes", "itemsize", "is_sparse", "is_quantized", "is_meta", "names",
    }
)  # fmt: skip
#: Tensor attributes that are views of the tensor.
TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})
#: Methods of an ``nn.Module`` attribute that only read it.
NN_MODULE_READ_METHODS = frozenset(
    {"parameters", "named_parameters", "buffers", "named_buffers", "children", "modules", "state_dict", "extra_repr"}
)

# Names of aten compute ops, used where the receiver's type is unknown (Python) or never known (C++ methods).
# In-place variants (``add_``) are recognised by stripping the trailing underscore.
ATEN_COMPUTE_NAMES = _words(
    """
    __call__ _call_impl _conv_forward _convolution _log_softmax _softmax abs absolute acos acosh adaptive_avg_pool1d
    adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d add addbmm
    addcdiv addcmul addmm addmv addr all amax amin aminmax angle any argmax argmin argsort asin asinh atan atan2
    atanh avg_pool1d avg_pool2d avg_pool3d baddbmm batch_norm bernoulli bilinear binary_cross_entropy bitwise_and
    bitwise_not bitwise_or bitwise_xor bmm bucketize cat cdist ceil celu chain_matmul cholesky clamp clamp_max
    clamp_min clip conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution cos cosh
    cosine_similarity count_nonzero cross cross_entropy cudnn_convolution cummax cummin cumprod cumsum deg2rad diff
    digamma dist div divide dot dropout einsum elu embedding eq erf erfc erfinv exp exp2 expm1 fft flip floor
    floor_divide fmod forward frac gather ge gelu ger glu grid_sample group_norm gt hardshrink hardsigmoid hardswish
    hardtanh histc hypot ifft index_add index_copy index_fill index_put index_select inner instance_norm interpolate
    inverse irfft isclose isfinite isinf isnan kl_div kron kthvalue l1_loss layer_norm le leaky_relu lerp lgamma
    linalg_vector_norm linear log log10 log1p log2 log_softmax logaddexp logcumsumexp logical_and logical_not
    logical_or logical_xor logit logsumexp lt masked_fill masked_scatter masked_select matmul max max_pool1d
    max_pool2d max_pool3d maximum mean median min minimum mish mkldnn_convolution mm mode mse_loss mul multiply mv
    nan_to_num nanmean nansum ne neg negative nll_loss nonzero norm normalize outer pad pairwise_distance pdist
    pixel_shuffle pixel_unshuffle pow prelu prod quantile rad2deg reciprocal relu relu6 remainder renorm repeat
    repeat_interleave rfft roll rot90 round rrelu rsqrt scaled_dot_product_attention scatter scatter_add
    scatter_reduce searchsorted selu sigmoid sign signbit silu sin sinc sinh smooth_l1_loss softmax softmin softplus
    softshrink sort sqrt square stack std sub subtract sum svd tan tanh tensordot threshold tile topk trace tril
    triu true_divide trunc unique var vdot where xlogy
    """
)


def is_compute_name(name: str) -> bool:
    """True when ``name`` is an aten compute op, its in-place form, or an arithmetic dunder."""
    if name in ATEN_COMPUTE_NAMES:
        return True
    if name.endswith("_") and not name.startswith("_") and name[:-1] in ATEN_COMPUTE_NAMES:
        return True
    return bool(re.fullmatch(r"__(?:i|r)?(?:add|sub|mul|matmul|truediv|floordiv|mod|pow|neg|abs|and|or|xor|"
                             r"lshift|rshift|invert|lt|le|gt|ge|eq|ne|pos)__", name))  # fmt: skip


# --- C++ / CUDA / MUSA -----------------------------------------------------------------------------------------

#: Top-level namespaces of torch's C++ API.
CPP_TORCH_NAMESPACES = frozenset({"at", "torch", "c10", "aten", "caffe2"})

#: Names after the torch namespace (``at::empty`` -> ``empty``; MUSA spelled as CUDA) that are plumbing.
#: Single-segment names starting with an upper-case letter (types: ``Tensor``, ``Half``) and ``k*`` constants
#: (``kFloat``, ``kCUDA``) are plumbing too, except the ones in :data:`CPP_TORCH_SPECIAL`.
CPP_TORCH_PLUMBING = frozenset(
    {
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
        "arange", "from_blob", "dtype", "device", "layout", "requires_grad", "memory_format", "elementSize",
        "toString", "isFloatingType", "isComplexType", "isIntegralType", "isReducedFloatingType", "irange",
        "parallel_for", "parallel_reduce", "get_num_threads", "get_thread_num", "in_parallel_region", "divup",
        "ceil_div", "nullopt", "make_optional", "optional", "string_view", "complex", "acc_type", "opmath_type",
        "typeMetaToScalarType", "scalarTypeToTypeMeta", "toUnderlying", "toRealValueType", "toComplexType",
        "cuda::getCurrentCUDAStream", "cuda::getDefaultCUDAStream", "cuda::getCurrentDeviceProperties",
        "cuda::getDeviceProperties", "cuda::current_device", "cuda::device_count", "cuda::CUDAGuard",
        "cuda::OptionalCUDAGuard", "cuda::CUDAStream", "cuda::CUDAStreamGuard", "cuda::OptionalCUDAStreamGuard",
        "cuda::CUDAEvent", "cuda::warp_size", "cuda::CUDACachingAllocator::raw_alloc",
        "cuda::CUDACachingAllocator::raw_delete", "cuda::CUDACachingAllocator::get", "cuda::detail::getCUDAHooks",
        "cuda::ATenCeilDiv", "detail::ScalarTypeToCPPType", "impl::ScalarTypeToCPPType", "CppTypeToScalarType",
        "util::get_fully_qualified_type_name", "native::ceil_log2",
    }
)  # fmt: skip
#: Prefixes (after the torch namespace) of plumbing: vectorisation helpers, enum members.
CPP_TORCH_PLUMBING_PREFIXES = (
    "vec::", "ScalarType::", "Layout::", "MemoryFormat::", "DeviceType::", "Half::", "BFloat16::", "detail::TypeMeta",
    "indexing::", "internal::GRAIN_SIZE", "cuda::device_synchronize", "cuda::stream_synchronize",
)  # fmt: skip
#: Names after the torch namespace with a flag of their own (prefix match on ``::`` boundaries).
CPP_TORCH_SPECIAL: dict[str, str] = {
    "cuda::getStreamFromPool": "side_stream",
    "cuda::getStreamFromExternal": "side_stream",
    "cuda::setCurrentCUDAStream": "side_stream",
    "cuda::CUDAGraph": "graph_replay",
    "cuda::blas": "vendor_library",
    "cuda::getCurrentCUDABlasHandle": "vendor_library",
    "cuda::getCurrentCUDABlasLtHandle": "vendor_library",
    "cuda::getCurrentCUDASparseHandle": "vendor_library",
    "cuda::getCurrentCUDASolverDnHandle": "vendor_library",
    "native::cpublas": "vendor_library",
    "globalContext": "global_state",
    "set_num_threads": "global_state",
    "set_num_interop_threads": "global_state",
    "manual_seed": "global_state",
    "Dispatcher": "monkeypatch",
    "Library": "monkeypatch",
    "impl::OperatorEntry": "monkeypatch",
    "jit": "graph_replay",
    **dict.fromkeys(_PROFILER_SWITCHES := ("RecordFunctionGuard", "DisableRecordFunctionGuard",
                                           "enableRecordFunction", "clearCallbacks"), "profiler_tampering"),
}  # fmt: skip

#: Qualified ``std::`` names that are banned (prefix match on ``::`` boundaries).
CPP_STD_BANS: dict[str, str] = {
    # std::thread, std::jthread and std::async are honest parallelism (joined before returning): the parent
    # measures the worker's cores from outside (musaenv.evaluator.cpu_watch) instead of banning the name.
    "std::system": "thread_or_process",
    **dict.fromkeys(
        ("std::fopen", "std::freopen", "std::ofstream", "std::ifstream", "std::fstream", "std::filebuf",
         "std::basic_ofstream", "std::basic_ifstream", "std::basic_fstream", "std::filesystem", "std::rename",
         "std::tmpfile", "std::tmpnam", "std::basic_filebuf", "std::wfilebuf", "std::wifstream", "std::wofstream",
         "std::wfstream", "std::experimental::filesystem"),
        "file_access",
    ),
    "std::getenv": "introspection",
}  # fmt: skip

#: Identifiers banned wherever they appear unqualified (or ``::``-qualified), called or not.
CPP_NAME_BANS: dict[str, str] = {
    **dict.fromkeys(_PROFILER_SWITCHES, "profiler_tampering"),  # also under ``using namespace at``
    **dict.fromkeys(
        ("pthread_create", "thrd_create", "fork", "vfork", "system", "popen", "execl", "execlp", "execle", "execv",
         "execvp", "execvpe", "execve", "fexecve", "posix_spawn", "posix_spawnp", "clone", "clone3", "__clone",
         "kill", "ptrace", "prctl", "syscall", "daemon", "CreateThread", "CreateProcessA", "CreateProcessW",
         "_beginthread", "_beginthreadex", "uv_thread_create", "g_thread_new"),
        "thread_or_process",
    ),
    **dict.fromkeys(
        ("socket", "connect", "getaddrinfo", "gethostbyname", "inet_pton", "inet_addr", "curl_easy_init",
         "curl_easy_perform"),
        "network",
    ),
    **dict.fromkeys(
        ("fopen", "freopen", "fdopen", "open", "openat", "creat", "unlink", "unlinkat", "rename", "renameat",
         "mkdir", "rmdir", "opendir", "mmap", "shm_open", "truncate", "ftruncate", "tmpfile", "mkstemp", "chdir",
         "chmod", "symlink", "readlink", "realpath", "remove"),
        "file_access",
    ),
    **dict.fromkeys(("dlopen", "dlsym", "dlmopen", "dlvsym", "LoadLibraryA", "LoadLibraryW", "GetProcAddress"),
                    "dynamic_code"),
    **dict.fromkeys(("getenv", "secure_getenv", "setenv", "putenv", "unsetenv", "clearenv", "environ"),
                    "introspection"),
    **dict.fromkeys(("TORCH_LIBRARY_IMPL", "TORCH_LIBRARY_FRAGMENT"), "monkeypatch"),
}  # fmt: skip

#: Identifier patterns (searched in code with comments and strings removed) -> flag.
CPP_NAME_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:cuda|musa|cu|mu)Stream(?:Create\w*|PerThread)|(?:cuda|musa|cu|mu)(?:LaunchHostFunc|"
                r"StreamAddCallback)"), "side_stream"),
    (re.compile(r"(?:cuda|musa|cu|mu)(?:StreamBeginCapture\w*|StreamEndCapture|Graph\w*|"
                r"ThreadExchangeStreamCaptureMode)"), "graph_replay"),
    (re.compile(r"(?:cuda|musa)(?:DeviceSetLimit|StreamSetAttribute|CtxResetPersistingL2Cache|DeviceSetCacheConfig|"
                r"DeviceSetSharedMemConfig|DeviceReset|SetDeviceFlags)|accessPolicyWindow|"
                r"(?:cuda|musa)LimitPersistingL2CacheSize"), "global_state"),
    (re.compile(r"(?:cublas|cudnn|mublas|mudnn|cusparse|cufft|cusolver|cutensor|rocblas|hipblas|miopen)\w*|"
                r"(?:cblas|mkl|MKL|dnnl|openblas|libxsmm|bli)_\w+|[sdcz](?:gemm|gemv|axpy|dot|syrk|trsm|scal)_"),
     "vendor_library"),
    # The whole CPython C API (PyObject_SetAttrString on the time module swaps the harness's timer).
    (re.compile(r"_?Py[A-Z][A-Za-z0-9]*_\w+|Py_\w+|_Py\w+|PyObject|PyTypeObject|PyThreadState|PyGILState\w*"),
     "python_c_api"),
)  # fmt: skip

#: Root namespaces of vendor libraries; ``thrust`` and ``cub`` are handled with :data:`CPP_THRUST_OK` and a
#: device-wide check (``cub::Device*``).
CPP_VENDOR_NAMESPACES = frozenset({"cutlass", "cute", "dnnl", "mkldnn", "Eigen", "cudnn_frontend", "oneapi", "mudnn"})
CPP_THRUST_OK = frozenset(
    {"device_ptr", "device_pointer_cast", "raw_pointer_cast", "pair", "tuple", "complex", "get", "make_pair",
     "make_tuple", "counting_iterator", "host_vector", "device_vector"}
)  # fmt: skip
#: pybind11 entry points back into the Python interpreter.
CPP_PYBIND_DYNAMIC = frozenset({"import", "eval", "exec", "eval_file", "globals"})
#: C/C++ math functions that share a name with an aten op: ambiguous under ``using namespace at``.
CPP_MATH_OVERLAP = _words(
    "abs exp exp2 expm1 log log10 log1p log2 pow sqrt rsqrt sin cos tan asin acos atan atan2 sinh cosh tanh asinh "
    "acosh atanh erf erfc lgamma floor ceil round trunc fmod hypot max min signbit remainder norm sort fill"
)

#: Headers -> flag (regex on the header name).
CPP_HEADER_FLAGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(?:cublas|cudnn|mublas|mudnn|cusparse|cufft|cusolver|cutensor|cblas|mkl|dnnl|oneapi/dnnl|mkldnn|"
                r"openblas|eigen3?/|Eigen/|unsupported/Eigen|cutlass/|cute/|cudnn_frontend|rocblas|hipblas|miopen|"
                r"libxsmm|blis|ATen/cuda/CUDABlas|ATen/cuda/CUDASparse|ATen/musa/MUSABlas)", re.I), "vendor_library"),
    (re.compile(r"^ATen/native/"), "library_compute"),
    (re.compile(r"^(?:dlfcn\.h|pybind11/embed\.h|pybind11/eval\.h)$"), "dynamic_code"),
    (re.compile(r"^(?:sys/socket\.h|netinet/|arpa/inet\.h|netdb\.h|curl/)"), "network"),
    (re.compile(r"^(?:spawn\.h|sys/wait\.h)$"), "thread_or_process"),
    (re.compile(r"^(?:\.\.|/|~|[A-Za-z]:)|\.\./|\\"), "file_access"),
)  # fmt: skip

#: Linker libraries that are vendor compute.
CPP_VENDOR_LIB_RE = re.compile(
    r"^(?:cublas|cublasLt|cudnn\w*|mublas\w*|mudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|cutensor\w*|mkl\w*|"
    r"openblas\w*|blas|cblas|lapack\w*|dnnl|mkldnn|rocblas|hipblas\w*|MIOpen|xsmm|blis)$"
)
#: Linker libraries that are fine.
CPP_OK_LIBS = frozenset({"gomp", "iomp5", "omp", "m", "pthread", "cuda", "cudart", "musa", "musart", "stdc++"})
