"""C++/CUDA/MUSA source checks: preprocessing defeats macros, library and vendor calls, bans, source recovery."""

from __future__ import annotations

import os
import shutil

import pytest
from static_samples import candidate, line_of

from musaenv.verification import analyze_candidate
from musaenv.verification.static_cpp import scan_source

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for preprocessing")


def fn(body: str) -> str:
    return "torch::Tensor k(torch::Tensor x) { " + body + " }"


# (id, C++ source, expected flag)
CPP_CHEATS = [
    ("at_call", fn("return at::matmul(x, x);"), "library_compute"),
    ("torch_call", fn("return torch::relu(x);"), "library_compute"),
    ("global_qualified", fn("return ::at::matmul(x, x);"), "library_compute"),
    ("native", fn("return at::native::relu(x);"), "library_compute"),
    ("tensor_method", fn("return x.sigmoid();"), "library_compute"),
    ("inplace_method", fn("x.add_(1); return x;"), "library_compute"),
    ("function_pointer", fn("auto f = &at::mm; return f(x, x);"), "library_compute"),
    ("member_pointer", fn("auto m = &at::Tensor::matmul; return (x.*m)(x);"), "library_compute"),
    ("dispatch_prefix", fn("return x.__dispatch_matmul(x);"), "library_compute"),
    ("namespace_alias", "namespace A = torch::nn::functional;\n" + fn("return A::gelu(x);"), "library_compute"),
    ("using_namespace", "using namespace at;\n" + fn("return softmax(x, 1);"), "library_compute"),
    ("split_by_continuation", fn("return at\\\n::matmul(x, x);"), "library_compute"),
    ("split_by_comment", fn("return at::/* hidden */matmul(x, x);"), "library_compute"),
    ("digit_separators", fn("int a = 1'000; auto y = at::relu(x); int b = 2'0; return y;"), "library_compute"),
    ("cublas_header", "#include <cublas_v2.h>\n" + fn("return x;"), "vendor_library"),
    ("cublas_call", fn("cublasHandle_t h; cublasCreate(&h); return x;"), "vendor_library"),
    ("cudnn_call", fn("cudnnHandle_t h; cudnnCreate(&h); return x;"), "vendor_library"),
    ("mublas_call", fn("mublasHandle_t h; mublasCreate(&h); return x;"), "vendor_library"),
    ("mudnn", fn("::musa::dnn::Handle h; return x;"), "vendor_library"),
    (
        "aten_blas",
        fn("at::cuda::blas::gemm<float>('n', 'n', 1, 1, 1, 1.f, 0, 1, 0, 1, 0.f, 0, 1); return x;"),
        "vendor_library",
    ),
    ("cutlass", fn("cutlass::gemm::device::Gemm<float, cutlass::layout::RowMajor> g; return x;"), "vendor_library"),
    ("thrust_sort", fn("thrust::sort(thrust::device, p, p + 4); return x;"), "vendor_library"),
    ("cub_device", fn("cub::DeviceReduce::Sum(t, b, i, o, n); return x;"), "vendor_library"),
    ("cblas", fn("cblas_sgemm(CblasRowMajor, a, b, 1, 1, 1, 1.f, p, 1, p, 1, 0.f, p, 1); return x;"), "vendor_library"),
    (
        "stream_create",
        fn("cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); return x;"),
        "side_stream",
    ),
    ("stream_pool", fn("auto s = at::cuda::getStreamFromPool(); return x;"), "side_stream"),
    ("musa_stream", fn("musaStream_t s; musaStreamCreate(&s); return x;"), "side_stream"),
    ("graph_capture", fn("cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); return x;"), "graph_replay"),
    ("graph_launch", fn("cudaGraphLaunch(g, s); return x;"), "graph_replay"),
    ("thrd_create", fn("thrd_t t; thrd_create(&t, w, nullptr); return x;"), "thread_or_process"),
    ("clone3", fn("long r = clone3(&args, sizeof(args)); return x;"), "thread_or_process"),
    ("sgemm_plain", fn("sgemm(&n, &n, &m, &m, &m, &a, p, &m, p, &m, &b, p, &m); return x;"), "vendor_library"),
    ("sgemm_upper", fn("SGEMM(&n, &n, &m, &m, &m, &a, p, &m, p, &m, &b, p, &m); return x;"), "vendor_library"),
    ("mkl_call", fn("mkl_set_num_threads(4); return x;"), "vendor_library"),
    ("py_c_api", fn('PyObject* t = PyImport_ImportModule("time"); return x;'), "python_c_api"),
    ("py_setattr", fn('PyObject_SetAttrString(t, "perf_counter", f); return x;'), "python_c_api"),
    ("raw_syscall", fn('long r; asm volatile("syscall" : "=a"(r) : "a"(39)); return x;'), "raw_syscall"),
    ("pthread", fn("pthread_t t; pthread_create(&t, nullptr, f, nullptr); return x;"), "thread_or_process"),
    ("system", fn('system("ls"); return x;'), "thread_or_process"),
    ("global_system", fn('::system("ls"); return x;'), "thread_or_process"),
    ("socket", fn("int s = socket(2, 1, 0); return x;"), "network"),
    ("fopen", fn('FILE* f = fopen("/tmp/a", "w"); return x;'), "file_access"),
    ("ofstream", fn('std::ofstream o("/tmp/a"); return x;'), "file_access"),
    ("path_include", '#include "../../reference.py"\n' + fn("return x;"), "file_access"),
    ("dlopen", fn('void* h = dlopen("libx.so", 1); return x;'), "dynamic_code"),
    ("py_import", fn('auto t = py::module_::import("torch"); return x;'), "dynamic_code"),
    ("py_attr", fn('py::object o = py::cast(x); return o.attr("relu")().cast<torch::Tensor>();'), "dynamic_code"),
    ("getenv", fn('if (getenv("T")) return x; return x;'), "introspection"),
    ("library_impl", "TORCH_LIBRARY_IMPL(aten, CPU, m) {}\n" + fn("return x;"), "monkeypatch"),
    ("persisting_l2", fn("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20); return x;"), "global_state"),
    ("computed_include", "#define H <cublas_v2.h>\n#include H\n" + fn("return x;"), "computed_include"),
    ("adl_call", fn("return clamp_min(x, 0);"), "library_compute"),
    ("adl_nested", fn("auto y = x.contiguous(); return add(relu(y), 1);"), "library_compute"),
    ("record_guard", fn("at::RecordFunctionGuard off(false); return x;"), "profiler_tampering"),
    ("record_guard_unqualified", "using namespace at;\n" + fn("RecordFunctionGuard off(false); return x;"),
     "profiler_tampering"),
    ("record_switch", fn("at::enableRecordFunction(false); return x;"), "profiler_tampering"),
]  # fmt: skip


@pytest.mark.parametrize(("cpp", "flag"), [c[1:] for c in CPP_CHEATS], ids=[c[0] for c in CPP_CHEATS])
def test_cpp_cheat_is_flagged(cpp: str, flag: str) -> None:
    report = analyze_candidate(candidate(cpp=cpp), policy="strict")
    assert flag in report.flags, report.messages


TOKEN_PASTING = [
    ("paste_name", "#define M(a, b) a##b\n" + fn("return M(at::mat, mul)(x, x);")),
    ("paste_namespace", "#define NS at\n#define CAT(a, b) a##b\n" + fn("return NS::CAT(mat, mul)(x, x);")),
    ("paste_root", "#define CAT(a, b) a##b\n" + fn("return CAT(a, t)::matmul(x, x);")),
    ("digraph_define", "%:define M(a, b) a%:%:b\n" + fn("return M(at::ma, tmul)(x, x);")),
    ("object_macro_chain", "#define A at\n#define B A::\n#define C B matmul\n" + fn("return C(x, x);")),
    ("hidden_in_branch", "#if 0\n#define X 1\n#endif\n#ifdef __CUDA_ARCH__\n#define N at\n#endif\n"
     + fn("return N::matmul(x, x);")),
]  # fmt: skip


@needs_gxx
@pytest.mark.parametrize("cpp", [c[1] for c in TOKEN_PASTING], ids=[c[0] for c in TOKEN_PASTING])
def test_macros_and_token_pasting_hide_nothing(cpp: str) -> None:
    report = analyze_candidate(candidate(cpp=cpp))
    assert "library_compute" in report.flags, report.messages
    assert any("at::matmul" in f.message for f in report.errors)


@needs_gxx
def test_both_branches_of_a_conditional_macro_are_checked() -> None:
    cpp = "#ifdef REAL_BUILD\n#define M(a, b) a##b\n#else\n#define M(a, b) b\n#endif\n"
    report = analyze_candidate(candidate(cpp=cpp + fn("return M(a, t::matmul)(x, x);")))
    assert "library_compute" in report.flags
    assert "macro_redefined" in report.warning_flags


@needs_gxx
def test_defines_from_build_flags_are_applied() -> None:
    source = candidate(cpp=fn("return MM(x, x);"), kwargs=', extra_cflags=["-O3", "-DMM=at::matmul"]')
    assert "library_compute" in analyze_candidate(source).flags


@needs_gxx
def test_preprocessing_is_what_reveals_pasted_names() -> None:
    source = candidate(cpp="#define CAT(a, b) a##b\n" + fn("return CAT(at, ::matmul)(x, x);"))
    assert "library_compute" in analyze_candidate(source).flags
    assert analyze_candidate(source, preprocess=False).ok


def test_missing_preprocessor_is_a_warning_and_the_raw_text_is_still_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.devnull)  # no g++ reachable
    report = analyze_candidate(candidate(cpp=fn("return at::matmul(x, x);")))
    assert report.flags == ("library_compute",)
    assert report.warning_flags == ("preprocessor_unavailable",)


@pytest.mark.parametrize(
    "cpp",
    [
        fn('TORCH_CHECK(x.is_contiguous(), "unlike at::matmul, this needs contiguous input"); return x;'),
        "// at::matmul would be faster\n/* cublasSgemm too */\n" + fn("return x;"),
        fn("typedef cub::BlockReduce<float, 256> BR; __shared__ typename BR::TempStorage t; return x;"),
        fn("float m = std::max(1.f, std::numeric_limits<float>::infinity()); std::vector<int> v; v.size(); return x;"),
        "using namespace torch;\nstatic float relu(float v) { return v > 0 ? v : 0; }\n" + fn("relu(1.f); return x;"),
        fn("auto o = torch::zeros({2}, torch::TensorOptions().dtype(torch::kFloat32).device(x.device())); return o;"),
        fn("auto a = x.packed_accessor32<float, 2, torch::RestrictPtrTraits>(); return x.view({-1}).contiguous();"),
        fn("using namespace torch::indexing; auto s = x.index({Slice(), 0}); return s.clone();"),
        fn("at::parallel_for(0, 8, at::internal::GRAIN_SIZE, [&](int64_t b, int64_t e) {}); return x;"),
    ],
    ids=["string", "comment", "cub_block", "std_math", "local_relu", "tensor_options", "accessor", "slice", "parallel"],
)
def test_plumbing_comments_and_strings_are_not_flagged(cpp: str) -> None:
    assert analyze_candidate(candidate(cpp=cpp)).findings == ()


def test_inline_asm_is_only_a_warning() -> None:
    report = analyze_candidate(candidate(cpp=fn('asm volatile("membar.gl;"); return x;')))
    assert report.ok
    assert report.warning_flags == ("inline_asm",)


def test_ambiguous_math_name_under_using_namespace_is_a_warning() -> None:
    report = analyze_candidate(candidate(cpp="using namespace at;\n" + fn("return tanh(x);")))
    assert report.ok
    assert report.warning_flags == ("library_compute",)


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        (', extra_ldflags=["-lcublas"]', "vendor_library"),
        (', extra_ldflags=["-lmkl_rt"]', "vendor_library"),
        (', extra_ldflags=["-L/opt/lib", "-lfoo"]', "build_flag_refused"),
        (', extra_cflags=["-include", "/etc/passwd"]', "build_flag_refused"),
        (', extra_cflags=["-fplugin=/tmp/p.so"]', "build_flag_refused"),
        (', extra_cflags=["-wrapper", "/tmp/payload.sh"]', "build_flag_refused"),
        (', extra_cflags=["-O3 -B/tmp/bin"]', "build_flag_refused"),
        (', extra_cuda_cflags=["-Xcompiler", "-wrapper,/tmp/p"]', "build_flag_refused"),
        (', extra_ldflags=["-Wl,-rpath,/tmp"]', "build_flag_refused"),
        (', extra_include_paths=["/data"]', "build_flag_refused"),
        (', build_directory="/tmp/elsewhere"', "file_access"),
    ],
    ids=[
        "cublas",
        "mkl",
        "lib_path",
        "forced_include",
        "plugin",
        "wrapper",
        "joined_B",
        "xcompiler",
        "rpath",
        "include_paths",
        "build_directory",
    ],
)
def test_build_arguments_are_checked(kwargs: str, flag: str) -> None:
    assert flag in analyze_candidate(candidate(kwargs=kwargs)).flags


@pytest.mark.parametrize(
    "kwargs",
    [
        ', extra_cflags=[""]',  # KernelBench's prompt idiom
        ', extra_cflags=["-O3 -ffast-math", "-march=native", "-fopenmp"], extra_ldflags=["-fopenmp"]',
        ', extra_cflags=["-O3", "-std=c++17", "-DBLOCK=256", "-Wno-unused-variable", "-mavx2", "-mfma"]',
        ', extra_cuda_cflags=["-O3", "--use_fast_math", "-Xptxas", "-v", "-arch=sm_90", "-lineinfo"]',
    ],
    ids=["empty", "joined", "common", "cuda"],
)
def test_common_flags_are_allowed(kwargs: str) -> None:
    report = analyze_candidate(candidate(kwargs=kwargs))
    assert report.ok, report.messages


def test_library_compute_in_cpp_follows_the_policy() -> None:
    source = candidate(cpp=fn("cublasHandle_t h; return at::relu(x);"))
    assert set(analyze_candidate(source, policy="strict").flags) == {"library_compute", "vendor_library"}
    permissive = analyze_candidate(source, policy="permissive")
    assert permissive.ok and set(permissive.warning_flags) == {"library_compute", "vendor_library"}
    assert analyze_candidate(source, policy="off").findings == ()
    threaded = candidate(cpp=fn("pthread_t t; pthread_create(&t, nullptr, w, nullptr); return x;"))
    assert analyze_candidate(threaded, policy="off").flags == ("thread_or_process",)


HONEST_PARALLEL = [
    # std::thread pool joined before returning: policed by the parent's CPU measurement, not by its name
    fn(
        "std::vector<std::thread> ts; for (int i = 0; i < at::get_num_threads(); i++) ts.emplace_back([]{});"
        " for (auto& t : ts) t.join(); return x;"
    ),
    fn("auto f = std::async(std::launch::async, []{ return 1; }); f.get(); return x;"),
    fn("at::parallel_for(0, x.numel(), 1024, [&](int64_t b, int64_t e) {}); return x;"),
    # ATen's header-only SIMD type: its exp() is not Tensor.exp (the runtime profiler sees real aten calls)
    "#include <ATen/cpu/vec/vec.h>\n"
    + fn("using V = at::vec::Vectorized<float>; V v = V::loadu(p); v = (v - V(1.f)).exp(); v.store(p); return x;"),
]


@pytest.mark.parametrize("cpp", HONEST_PARALLEL, ids=["std_thread_pool", "std_async", "parallel_for", "vectorized"])
def test_honest_parallel_and_simd_kernels_are_accepted(cpp: str) -> None:
    report = analyze_candidate(candidate(cpp=cpp), policy="strict")
    assert report.ok, report.messages


def test_cpp_finding_points_at_the_python_line() -> None:
    source = candidate(cpp=fn("return x;") + "\n\n" + "torch::Tensor k2(torch::Tensor x) { return at::relu(x); }")
    (finding,) = analyze_candidate(source).errors
    assert finding.line == line_of(source, "at::relu")
    assert "cpp_sources line" in finding.message and "at::relu" in finding.message


RESOLVABLE = {
    "concatenation": 'HEAD = "#include <torch/extension.h>\\n"\nBODY = HEAD + "{cpp}"',
    "fstring_of_constants": 'N = "k2"\nBODY = f"torch::Tensor {{N}}(torch::Tensor x) {{{{ return at::relu(x); }}}}"',
    "augmented": 'BODY = "// start\\n"\nBODY += "{cpp}"',
    "list_and_dedent": 'import textwrap\nBODY = [textwrap.dedent("""\n    {cpp}\n    """), "// end"]',
    "join": 'BODY = "\\n".join(["// a", "{cpp}"])',
    "percent": 'BODY = "// block %d\\n%s" % (256, "{cpp}")',
    "either_branch": 'import sys\nif len(sys.path) > 1000:\n    BODY = "{cpp}"\nelse:\n    BODY = "// honest"',
}


@pytest.mark.parametrize("prelude", list(RESOLVABLE.values()), ids=list(RESOLVABLE))
def test_sources_built_from_constants_are_recovered_and_scanned(prelude: str) -> None:
    cpp = "torch::Tensor k2(torch::Tensor x) { return at::relu(x); }"
    body = prelude.replace("{cpp}", cpp) + '\nextra = load_inline(name="x", cpp_sources=BODY, functions=["k2"])\n'
    source = candidate(body + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.k(x)\n")
    report = analyze_candidate(source)
    assert "library_compute" in report.flags, report.messages
    assert "unresolved_source" not in report.flags


@pytest.mark.parametrize(
    "prelude",
    [
        'def build(src):\n    return load_inline(name="x", cpp_sources=src, functions=["k"])',
        'import os\nextra = load_inline(name="x", cpp_sources=os.getcwd(), functions=["k"])',
        'N = len("abc")\nextra = load_inline(name="x", cpp_sources=f"int v = {N};", functions=["k"])',
        'KW = dict(cpp_sources="")\nextra = load_inline(name="x", **KW)',
    ],
    ids=["parameter", "runtime_call", "runtime_fstring", "kwargs_call"],
)
def test_sources_that_cannot_be_recovered_are_flagged(prelude: str) -> None:
    source = candidate(prelude + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.k(x)\n")
    assert "unresolved_source" in analyze_candidate(source).flags


def test_scan_source_reports_each_construct_once_with_its_line() -> None:
    hits = scan_source("#include <torch/extension.h>\n\nint f() {\n  at::relu(a);\n  at::relu(b);\n}\n", "cpp")
    relu = [h for h in hits if h.symbol == "at::relu"]
    assert len(relu) == 1 and relu[0].line == 4 and relu[0].flag == "library_compute"


# Unqualified names that are ATen ops but mean something else here: none of these is a finding.
ADL_LOOKALIKES = [
    ("own_device_function", "__device__ float relu(float v) { return v > 0.f ? v : 0.f; }\n" + fn("return x;")),
    ("own_template", "template <typename T> T gelu(T v) { return v; }\n" + fn("float a = gelu(1.f); return x;")),
    ("lambda", fn("auto relu = [](float v) { return v > 0.f ? v : 0.f; }; float a = relu(2.f); return x;")),
    ("vector_named_like_an_op", fn("std::vector<float> gt(16), ut(16); gt[0] = 1.f; return x;")),
    ("scalar_constructed", fn("float mean(0.f); double var(1.0); mean += 1.f; return x;")),
    ("std_math", fn("float a = exp(1.f) + sqrt(2.f) + max(1.f, 2.f) + tanh(0.5f); return x;")),
]


@pytest.mark.parametrize("cpp", [c[1] for c in ADL_LOOKALIKES], ids=[c[0] for c in ADL_LOOKALIKES])
def test_unqualified_lookalikes_are_not_library_compute(cpp: str) -> None:
    report = analyze_candidate(candidate(cpp=cpp), policy="strict")
    assert "library_compute" not in report.flags, report.messages


def test_a_launcher_defined_in_the_cuda_source_may_share_an_op_name() -> None:
    """``softmax`` is declared in the C++ source and defined in the CUDA one: the call is the candidate's own."""
    code = (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        'CPP = "torch::Tensor softmax(torch::Tensor x);\\ntorch::Tensor k(torch::Tensor x) { return softmax(x); }"\n'
        'CU = "#include <torch/extension.h>\\ntorch::Tensor softmax(torch::Tensor x) { return x; }"\n'
        'ext = load_inline(name="e", cpp_sources=CPP, cuda_sources=CU, functions=["k"])\n\n\n'
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.k(x)\n"
    )
    report = analyze_candidate(code, policy="strict", backend="cuda")
    assert "library_compute" not in report.flags, report.messages
