"""Static checks of the CuPy candidate format: exactly the kernel surface passes, HACKS.md transposed to CuPy fails.

Static only (no CuPy needed): the candidates are parsed, never imported.
"""

from __future__ import annotations

import pytest

from musaenv.backends import get_backend
from musaenv.verification.static_py import analyze_candidate
from tests.gpu.cupy_candidates import (
    CACHED_RELU_CUPY,
    MATMUL_FALLTHROUGH_CUPY,
    NO_LAUNCH_CUPY,
    RELU_CUPY,
    SOFTMAX_CUPY,
)

HEAD = '''import cupy
import torch
import torch.nn as nn
SRC = r"""extern "C" __global__ void k(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}"""
_m = cupy.RawModule(code=SRC)
'''


def _fwd(body: str, pre: str = "") -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return HEAD + pre + f"\nclass ModelNew(nn.Module):\n    def forward(self, a, b=None):\n{lines}\n"


STD_CLASS = (
    "\nclass ModelNew(nn.Module):\n    def forward(self, a):\n        y = torch.empty_like(a)\n"
    "        _m.get_function('k')((1,), (1,), (a, y, 1))\n        return y\n"
)


def _edit(old: str, new: str) -> str:
    """The standard candidate with one edit of its module-level part."""
    assert old in HEAD
    return HEAD.replace(old, new) + STD_CLASS


MOD = "cupy.RawModule(code=SRC)"
KSRC = 'SRC = r"""'
LAUNCH = "y = torch.empty_like(a)\n_m.get_function('k')((1,), (1,), (a, y, a.numel()))"
HONEST = {
    "module_get_function": RELU_CUPY,
    "raw_kernel_cupy_views_shared_mem": SOFTMAX_CUPY,
    "kernel_built_in_forward": _fwd(
        "y = torch.empty_like(a)\nk = cupy.RawKernel(SRC, 'k')\nk((1,), (1,), (a, y, cupy.int64(a.numel())))\nreturn y"
    ),
    "local_get_function_then_launch": _fwd(
        "k = _m.get_function('k')\n" + LAUNCH.split("\n")[0] + "\nk((1,), (1,), (a, y, a.numel()))\nreturn y"
    ),
    "options_and_name_expressions": _edit(
        MOD,
        "cupy.RawModule(code=SRC, options=('-std=c++17', '--use_fast_math', '-DTILE=32'), name_expressions=[])",
    ),
    "dlpack_round_trip": _fwd(LAUNCH + "\nreturn torch.from_dlpack(cupy.from_dlpack(y))"),
}

# (name, source, flag that must be an error): HACKS.md numbers in the names.
HOSTILE = [
    ("S5_cupy_matmul_falls_through_to_cublas", MATMUL_FALLTHROUGH_CUPY, "library_compute"),
    (
        "S5_cupy_linalg",
        _fwd(LAUNCH + "\nreturn torch.from_dlpack(cupy.linalg.inv(cupy.from_dlpack(a)))"),
        "vendor_library",
    ),
    ("S5_cupy_fft", _fwd(LAUNCH + "\nreturn torch.from_dlpack(cupy.fft.fft(cupy.from_dlpack(a)))"), "vendor_library"),
    ("S5_cupyx_scipy", _fwd(LAUNCH + "\nreturn y", "import cupyx.scipy.signal\n"), "vendor_library"),
    ("S5_cublas_in_kernel_source", _edit(KSRC, 'SRC = r"""#include <cublas_v2.h>\n'), "vendor_library"),
    (
        "S4_cupy_array_operator",
        _fwd(LAUNCH + "\nreturn torch.from_dlpack(cupy.from_dlpack(a) @ cupy.from_dlpack(b))"),
        "forbidden_torch_op",
    ),
    (
        "S4_cupy_array_method",
        _fwd(LAUNCH + "\nreturn torch.from_dlpack(cupy.asarray(a).sum(axis=1))"),
        "forbidden_torch_op",
    ),
    (
        "S1_elementwise_kernel_is_cupys",
        _edit(MOD, MOD + "\nEK = cupy.ElementwiseKernel('T x', 'T y', 'y = x', 'e')"),
        "library_compute",
    ),
    (
        "S1_reduction_kernel_is_cupys",
        _edit(MOD, MOD + "\nRK = cupy.ReductionKernel('T x', 'T y', 'x', 'a + b', 'y = a', '0', 'r')"),
        "library_compute",
    ),
    ("S1_built_never_launched", NO_LAUNCH_CUPY, "no_custom_kernel"),
    ("S1_module_compiled_not_launched", _fwd("_m.compile()\nreturn a.clone()"), "no_custom_kernel"),
    ("S1_torch_does_the_work", _fwd(LAUNCH + "\nreturn torch.relu(y)"), "forbidden_torch_op"),
    (
        "T1_side_stream",
        _fwd(
            "y = torch.empty_like(a)\nwith cupy.cuda.Stream(non_blocking=True):\n"
            "    _m.get_function('k')((1,), (1,), (a, y, 1))\nreturn y"
        ),
        "side_stream",
    ),
    (
        "T1_external_stream",
        _fwd("y = torch.empty_like(a)\ns = cupy.cuda.ExternalStream(0)\n" + LAUNCH.split("\n")[1] + "\nreturn y"),
        "side_stream",
    ),
    ("T12_timing_events", _fwd(LAUNCH + "\ne = cupy.cuda.Event()\nreturn y"), "side_stream"),
    ("T8_cuda_graph", _fwd(LAUNCH + "\ng = cupy.cuda.Graph\nreturn y"), "graph_replay"),
    (
        "S3_runtime_memcpy",
        _fwd(LAUNCH + "\ncupy.cuda.runtime.memcpy(y.data_ptr(), a.data_ptr(), 4, 3)\nreturn y"),
        "cuda_runtime_api",
    ),
    ("S20_driver_api", _fwd(LAUNCH + "\nreturn y", "from cupy.cuda import driver\n"), "cuda_runtime_api"),
    ("T7_device_switch", _fwd("cupy.cuda.Device(1).use()\n" + LAUNCH + "\nreturn y"), "cuda_runtime_api"),
    ("S8_cupy_pool_memory", _fwd(LAUNCH + "\nkeep = cupy.ndarray((4,), cupy.float32)\nreturn y"), "library_compute"),
    (
        "S20_memory_pool",
        _fwd(LAUNCH + "\ncupy.get_default_memory_pool().free_all_blocks()\nreturn y"),
        "cuda_runtime_api",
    ),
    ("S23_compiler_module", _fwd(LAUNCH + "\nreturn y", "from cupy.cuda import compiler\n"), "cuda_runtime_api"),
    ("S23_backends_nvrtc", _fwd(LAUNCH + "\nreturn y", "import cupy_backends.cuda.libs.nvrtc\n"), "cuda_runtime_api"),
    ("S23_private_module", _fwd(LAUNCH + "\nreturn y", "from cupy._core import core\n"), "cuda_runtime_api"),
    ("S23_star_import", _fwd(LAUNCH + "\nreturn y", "from cupy import *\n"), "dynamic_code"),
    ("S23_computed_kernel_source", _edit(MOD, "cupy.RawModule(code=SRC + str(id(SRC)))"), "unresolved_source"),
    ("S14_cubin_from_a_file", _edit(MOD, "cupy.RawModule(path='/tmp/k.cubin')"), "file_access"),
    ("S14_cupy_load", _fwd(LAUNCH + "\nreturn torch.from_dlpack(cupy.load('out.npy'))"), "file_access"),
    ("S14_include_outside", _edit(KSRC, 'SRC = r"""#include "/etc/passwd"\n'), "file_access"),
    ("S23_include_path_option", _edit(MOD, "cupy.RawModule(code=SRC, options=('-I/etc',))"), "build_flag_refused"),
    (
        "T2_nvcc_backend_runs_a_process",
        _edit("cupy.RawModule(code=SRC)", "cupy.RawModule(code=SRC, backend='nvcc')"),
        "build_flag_refused",
    ),
    (
        "T2_syscall_in_kernel_source",
        _edit(KSRC, 'SRC = r"""extern "C" int system(const char*);\nvoid f() { system("id"); }\n'),
        "thread_or_process",
    ),
]


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_cupy_candidates_pass(name):
    r = analyze_candidate(HONEST[name], backend="cupy")
    assert r.ok, [f.message for f in r.findings]
    assert r.kernel_calls, "the launch is the candidate's kernel call"


def test_the_prompts_example_passes_the_checks_it_states():
    example = get_backend("cupy").prompt_note.split("```python\n", 1)[1].split("```", 1)[0]
    r = analyze_candidate(example, backend="cupy")
    assert r.ok and r.kernel_calls, [f.message for f in r.findings]


@pytest.mark.parametrize(("name", "source", "flag"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_cupy_candidates_are_refused(name, source, flag):
    r = analyze_candidate(source, backend="cupy")
    assert not r.ok
    assert flag in {f.flag for f in r.errors}, [(f.flag, f.message) for f in r.findings]


def test_the_output_cache_is_reported_and_left_to_the_runtime_repeat():
    r = analyze_candidate(CACHED_RELU_CUPY, backend="cupy")
    assert "output_cache" in {f.flag for f in r.warnings}


def test_cupy_is_an_import_outside_the_allowlist_for_the_other_backends():
    for backend in ("cuda", "cpu", "triton"):
        r = analyze_candidate(RELU_CUPY, backend=backend)
        assert "banned_import" in {f.flag for f in r.errors}, backend


def test_library_compute_through_cupy_follows_the_policy():
    permissive = analyze_candidate(MATMUL_FALLTHROUGH_CUPY, backend="cupy", policy="permissive")
    assert permissive.ok and "library_compute" in {f.flag for f in permissive.warnings}
    # the safety bans stay errors under every policy
    memcpy = next(h[1] for h in HOSTILE if h[0] == "S3_runtime_memcpy")
    assert "cuda_runtime_api" in {f.flag for f in analyze_candidate(memcpy, backend="cupy", policy="off").errors}


def test_kernelbench_policy_needs_a_global_kernel_in_the_cupy_sources():
    no_global = RELU_CUPY.replace("__global__ ", "__device__ ")
    r = analyze_candidate(no_global, backend="cupy", policy="kernelbench")
    assert "no_custom_kernel" in {f.flag for f in r.errors}
    assert analyze_candidate(RELU_CUPY, backend="cupy", policy="kernelbench").ok
