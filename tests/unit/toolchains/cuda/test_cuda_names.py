"""Judging a CUDA candidate's kernel errors without torch's headers, only where those headers could not explain them.

Both sides with the real compilers: a name no header of the unsplit unit spells (a kernel's own mistake) is the
verdict of the split build, in seconds; a kernel that needs a macro torch's headers define falls back to the build
as written, which then judges it as torch's own build would (it builds).
"""

from __future__ import annotations

import time

import pytest

from musaenv import _env
from musaenv.toolchains.cuda.compile import _CUDA_PRELUDE, cuda_compile_check
from musaenv.toolchains.cuda.fast import _device_step, cuda_fast_build
from musaenv.toolchains.cuda.names import looked_up, torch_includes, torch_names
from musaenv.toolchains.cuda.split import DEVICE_PRELUDE
from musaenv.toolchains.loader import pch_cache_root
from tests.unit.toolchains.cuda.test_cuda_fast import _spec, bound  # noqa: F401  (the fixture)
from tests.unit.toolchains.cuda.test_cuda_split import KB_ADD

needs_nvcc = pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")


def test_torch_includes_are_the_candidates_torch_headers_unless_a_macro_precedes_them():
    src = "#include <torch/extension.h>\n#include <cuda_fp16.h>\n#include <ATen/cuda/CUDAContext.h>\n"
    # In the candidate's order: its lines between two of them see the state after the first.
    assert torch_includes(src) == ["#include <torch/extension.h>", "#include <ATen/cuda/CUDAContext.h>"]
    assert torch_includes(src + "#include <torch/extension.h>\n") == torch_includes(src)
    assert torch_includes("#include <cuda.h>\n__global__ void k() {}\n") == []
    # A macro defined before a torch header may change what it declares: not judged without it.
    assert torch_includes("#define AT_PER_OPERATOR_HEADERS\n#include <ATen/ops/add.h>\n") is None
    assert torch_includes("#include <torch/extension.h>\n#define BLOCK 256\n") == ["#include <torch/extension.h>"]


@pytest.mark.parametrize(
    ("message", "context", "name"),
    [
        ('identifier "M_SQRT_2" is undefined', "", "M_SQRT_2"),
        ('class "Acc" has no member "a"', "", "a"),
        # a CUDA vector type is complete in both units (CUDA's own headers): no header adds a member to it
        ('class "uint3" has no member "w"', "", ""),
        ('struct "float4" has no member "a"', "", ""),
        ('namespace "std" has no member "clampf"', "", "clampf"),
        ('no instance of function template "std::clampf" matches the argument list', "", "clampf"),
        ('no operator "[]" matches these operands', "  operand types are: const float4 [ int ]\n", ""),
        ('no operator "=" matches these operands', "  operand types are: at::Half = float\n", None),
        ('no operator "*" matches these operands', "  operand types are: float4 * float\n", None),
        ('explicit type is missing ("int" assumed)', "", None),
    ],
)
def test_looked_up_names_what_a_header_would_have_to_declare(message, context, name):
    assert looked_up(message, context) == name


@pytest.mark.slow
@needs_nvcc
def test_the_names_of_torchs_headers_come_from_the_preprocessed_unsplit_unit(tmp_path):
    cuda_home = _env.cuda_home()
    assert cuda_home is not None
    cmd = _device_step({"extra_cuda_cflags": []}, cuda_home, None).command
    out = cmd.index("-o")
    flags = [f for f in [*cmd[1:out], *cmd[out + 2 : -1]] if f != "-c"]
    includes = ["#include <torch/extension.h>"]
    args = (cmd[0], flags, _CUDA_PRELUDE, includes, DEVICE_PRELUDE, tmp_path)
    names = torch_names(tmp_path / "store", *args, time.monotonic() + 600)
    assert names is not None
    assert {"TORCH_CHECK", "CUDA_KERNEL_ASSERT", "C10_HOST_DEVICE"} <= names.macros  # torch's, not CUDA's
    assert "__global__" not in names.macros and "M_PI" not in names.macros  # the same in the device unit
    # Undefined only inside headers, where no candidate line is (glibc's assert.h included again; c10's helpers).
    assert "assert" not in names.macros and "C10_NVCC" not in names.macros
    assert {"half2", "max", "Tensor", "M_PI"} <= names.tokens and "M_SQRT_2" not in names.tokens
    # Kept in the header store: the second ask reads it (no time left to compute anything).
    assert torch_names(tmp_path / "store", *args, time.monotonic()) == names
    assert torch_names(tmp_path / "other", *args, time.monotonic()) is None  # nothing kept, no time: no names


UNDECLARED = KB_ADD.replace("out[idx] = add2(a[idx], b[idx]);", "out[idx] = add2(a[idx], b[idx]) * M_SQRT_2;")
# CUDA_KERNEL_ASSERT is a macro of c10/macros/Macros.h, which torch/types.h includes: only the unsplit unit has it.
TORCH_MACRO = KB_ADD.replace("if (idx < size)", "CUDA_KERNEL_ASSERT(size >= 0);\n    if (idx < size)")


@pytest.mark.slow
@needs_nvcc
def test_a_kernel_name_no_header_declares_is_the_verdict_of_the_split(bound, tmp_path):  # noqa: F811
    spec, name = _spec(UNDECLARED)
    res = cuda_fast_build(spec, name, tmp_path, pch_cache_root())
    assert res is not None and not res.ok, res
    assert 'error: identifier "M_SQRT_2" is undefined' in res.log and res.log.startswith("== cuda: ")
    assert [s["name"] for s in res.steps] == ["device"]  # the host part was not waited for


@pytest.mark.slow
@needs_nvcc
def test_a_kernel_that_needs_torchs_headers_falls_back_and_builds_as_written(bound, tmp_path):  # noqa: F811
    spec, name = _spec(TORCH_MACRO)
    declined: list[dict[str, str]] = []
    assert cuda_fast_build(spec, name, tmp_path, pch_cache_root(), declined=declined) is None
    assert "abandoned" in declined[-1]["why"], declined
    # The same macro beside a real syntax error: the error is not judged without the header either.
    broken = TORCH_MACRO.replace("out[idx] = add2(a[idx], b[idx]);", "out[idx] = add2(a[idx], b[idx]) +;")
    spec2, name2 = _spec(broken)
    (tmp_path / "b").mkdir()
    assert cuda_fast_build(spec2, name2, tmp_path / "b", pch_cache_root()) is None
    # Built as written, the first builds (torch's header defines the macro): the fallback decided it right.
    check = cuda_compile_check([spec["cpp_sources"][0]], [TORCH_MACRO], ["add_cuda"], timeout_s=900)
    assert check.ok, check.log[-2000:]


# ``nvcc -E -dD`` of load_inline's 3 header lines and 2 torch includes (gcc's line markers: ``# 4 "u.cu" 2`` is
# back in u.cu at its line 4). b.h undefines A (candidate lines between the two includes see A only from a.h);
# assert.h, included again inside b.h, undefines ``assert`` and defines it anew before any candidate line.
UNSPLIT_E = """# 0 "u.cu"
#define __GNUC__ 13
# 1 "u.cu"
# 1 "types.h" 1
#define T 1
#define assert(e) ((void)0)
#define C10_NVCC 1
#undef C10_NVCC
# 2 "u.cu" 2
# 1 "a.h" 1
#define A 1
# 5 "u.cu" 2
# 1 "b.h" 1
#undef A
#undef assert
#define assert(e) ((void)0)
#define B(x) x
# 6 "u.cu" 2
"""


def test_the_macro_states_counted_are_those_a_candidate_line_sees():
    from musaenv.toolchains.cuda.names import _macros

    final, seen = _macros(UNSPLIT_E, "u.cu", 3)
    assert final == {"__GNUC__": "13", "T": "1", "assert": "(e) ((void)0)", "B": "(x) x"}
    assert seen["A"] == {"1", None}  # candidate lines between the two torch includes see A defined, later not
    assert seen["B"] == {"(x) x", None} and seen["T"] == {"1"}  # after the header lines only (line 4 on)
    assert seen["assert"] == {"(e) ((void)0)"}  # its undefinition inside b.h is seen by no candidate line
    assert "C10_NVCC" not in seen  # defined and undefined inside a header: no candidate line sees it
    # Line 4 of u.cu (the first candidate line) sees what types.h left: the last marker at or above it.
    _, prelude_only = _macros(UNSPLIT_E, "u.cu", 4)
    assert prelude_only["A"] == {"1", None} and prelude_only["T"] == {"1"}
    # Without line markers of the main file only the final state counts (the device unit: all its lines are above
    # the candidate's).
    _, device = _macros(UNSPLIT_E)
    assert "A" not in device and device["B"] == {"(x) x"} and device["assert"] == {"(e) ((void)0)"}
