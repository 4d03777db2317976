"""The CUDA split build with the real compilers (nvcc, g++, the linker), no GPU.

It says "this builds", or "this kernel code is wrong" when nvcc's errors on the device unit are the candidate's
own (in its lines, nothing torch's headers could explain: :func:`device_verdict`); every other way a part can
fail (a name torch's headers spell, a launcher error, a symbol nobody defines) returns ``None``, so the source is
built as written and that build's output is the verdict (the fidelity tests compare those verdicts with torch's
own build).
A real build's module is linked against torch's CUDA libraries; here empty stand-ins for the two a CPU wheel lacks
let the link run, as tests/fidelity/truth.py does.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from musaenv import _env
from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.cpp.bindobj import module_object
from musaenv.toolchains.cpp.compiler import torch_flags
from musaenv.toolchains.cpp.pch import PchStore
from musaenv.toolchains.cuda.compile import _CUDA_PRELUDE
from musaenv.toolchains.cuda.fast import cuda_fast_build, device_verdict
from musaenv.toolchains.cuda.names import TorchNames
from musaenv.toolchains.loader import pch_cache_root
from tests.unit.toolchains.cuda.test_cuda_split import KB_ADD

DECL = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"


def _spec(cuda: str = KB_ADD, cpp: str = DECL) -> tuple[dict[str, Any], str]:
    spec = BuildSpec.from_load_inline(
        {"cpp_sources": cpp, "cuda_sources": cuda, "functions": ["add_cuda"]}, "cuda", compile_only=True
    )
    return {**spec.to_dict(), "timeout_s": 600}, spec.name


@pytest.fixture(scope="module")
def bound() -> None:
    """The binding objects every cache has after its first C++ build (which compiles them beside its own unit:
    :func:`musaenv.toolchains.cpp.fastbuild.fast_build`)."""
    cache = pch_cache_root()
    assert module_object(torch_flags(cache, "musaenv_test", [], [], []), cache, []) is not None


@pytest.mark.slow
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_kernelbench_shaped_candidate_builds_through_the_split(bound, tmp_path):
    spec, name = _spec()
    res = cuda_fast_build(spec, name, tmp_path, pch_cache_root())
    assert res is not None and res.kernels == ("add_kernel",) and res.tier == "split", res
    by_name = {s.get("name"): s for s in res.steps}
    assert by_name["device"]["returncode"] == 0 and "torch/types.h" not in (tmp_path / "musaenv_device.cu").read_text()
    assert "-Wl,--no-undefined" in by_name["link"]["command"]
    # What it went without is named for a background build (the host part's torch/types.h header of these flags).
    had_header = PchStore(pch_cache_root()).include_flags("split", torch_flags(pch_cache_root(), name, [], [], []))
    assert ("split" in res.wanted) == (had_header is None), res.wanted


@pytest.mark.slow
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_a_failing_part_is_left_to_the_build_as_written(bound, tmp_path):
    # A launcher error (g++ on the host part); a kernel error and an unresolved symbol take the same road through
    # the evaluator in tests/integration/test_cuda_compile_only.py and tests/fidelity/test_fidelity_cuda.py.
    spec, name = _spec(KB_ADD.replace("torch::zeros_like(a);", "torch::zeros_like(a, 3.5, nullptr);"))
    assert cuda_fast_build(spec, name, tmp_path, pch_cache_root()) is None


@pytest.mark.slow
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_real_build_links_a_module_against_torchs_cuda_libraries(bound, tmp_path, monkeypatch):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "empty.c").write_text("")
    for lib in ("c10_cuda", "torch_cuda"):  # a CPU wheel of torch has neither; their symbols stay undefined
        subprocess.run(["cc", "-shared", "-o", str(stubs / f"lib{lib}.so"), str(stubs / "empty.c")], check=True)
    monkeypatch.setenv("LIBRARY_PATH", str(stubs))
    spec, name = _spec()
    build = tmp_path / "build"
    build.mkdir()
    res = cuda_fast_build(spec, name, build, pch_cache_root(), arch_flags=["-arch=sm_90"])
    assert res is not None, "the split build of a correct candidate failed"
    so = build / f"{name}.so"
    symbols = subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True, check=True).stdout
    defined = {line.split()[-1] for line in symbols.splitlines() if line.split()[-2:-1] == ["T"]}
    assert f"PyInit_{name}" in defined
    undefined = {line.split()[-1] for line in symbols.splitlines() if line.split()[:1] == ["U"]}
    assert not any("add_cuda" in s or "musaenv_launch" in s for s in undefined), undefined
    assert "cudaLaunchKernel" in " ".join(undefined)  # the kernel launch goes through cudart, as nvcc emits it


@pytest.mark.slow
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_a_kernel_syntax_error_is_diagnosed_once_in_the_lines_of_cuda_cu(bound, tmp_path):
    broken = KB_ADD.replace("out[idx] = add2(a[idx], b[idx]);", "out[idx] = add2(a[idx], b[idx]) +;")
    spec, name = _spec(broken)
    res = cuda_fast_build(spec, name, tmp_path, pch_cache_root())
    assert res is not None and not res.ok, res
    lines = "\n".join([*_CUDA_PRELUDE, broken]).splitlines()
    line = next(n for n, text in enumerate(lines, start=1) if "b[idx]) +;" in text)
    assert f"cuda.cu({line}): error: expected an expression" in res.log, res.log
    assert res.log.startswith("== cuda: ") and "musaenv_device" not in res.log
    # A name not found in a kernel stays with the unsplit check: test_device_verdict_takes_only_..._own_errors.


NONE_DECLARED = TorchNames(frozenset({"max", "half2", "TORCH_CHECK", "CUDA_KERNEL_ASSERT"}), frozenset({"TORCH_CHECK"}))


@pytest.mark.parametrize(
    ("output", "own"),
    [
        (
            'cuda.cu(12): error: expected a ";"\n  x = 1\n\n1 error detected in the compilation of "musaenv_device.cu".'
            "",
            True,
        ),
        ('cuda.cu(12): error: identifier "half2" is undefined\n', False),  # a header torch's brought declares it
        ('cuda.cu(12): error: identifier "M_SQRT_2" is undefined\n', True),  # no header of the unsplit unit spells it
        ('cuda.cu(12): error: no instance of overloaded function "max" matches the argument list\n', False),
        ('cuda.cu(12): error: no instance of overloaded function "std::clampf" matches the argument list\n', True),
        ('cuda.cu(12): error: namespace "std" has no member "clampf"\n', True),
        ('cuda.cu(12): error: namespace "std" has no member "max"\n', False),
        ('cuda.cu(28): error: class "uint3" has no member "w"\n', True),  # blockIdx.w: corpus problem_82_sample_1
        ('cuda.cu(28): error: class "Acc" has no member "max"\n', False),  # a class of another header: not judged
        (
            'cuda.cu(37): error: no operator "[]" matches these operands\n  operand types are: float4 [ int ]\n',
            True,
        ),
        (
            'cuda.cu(37): error: no operator "+" matches these operands\n  operand types are: float4 + float4\n',
            False,
        ),
        (
            'cuda.cu(37): error: no operator "[]" matches these operands\n            operand types are: Acc [ int ]\n',
            False,
        ),
        ('cuda.cu(12): error: explicit type is missing ("int" assumed)\n', False),  # names nothing: a header may
        (
            'cuda.cu(12): error: identifier "M_SQRT_2" is undefined\n'
            'cuda.cu(13): error: identifier "max" is undefined\n',
            False,
        ),
        ('musaenv_device.cu(40): error: expected a ")"\n', False),  # our shim: the unsplit check decides
        ('cuda.cu(2): error: expected a ";"\n', False),  # load_inline's header lines
        ('cuda.cu(9): catastrophic error: cannot open source file "foo.h"\n', False),
        ("nvcc fatal   : Unknown option '-foo'\n", False),
        ("cuda.cu(12): error: expected a \";\"\nnvcc error   : 'cudafe++' died\n", False),
    ],
)
def test_device_verdict_takes_only_errors_torchs_headers_cannot_explain(output, own):
    asked = []
    got = device_verdict(output, len(_CUDA_PRELUDE), lambda: asked.append(1) or NONE_DECLARED, "__global__ void k();")
    assert (got is not None) is own
    if own:
        assert 'compilation of "cuda.cu"' not in output or 'compilation of "cuda.cu"' in got
    assert len(asked) <= 1


SYNTAX = 'cuda.cu(12): error: expected a ";"\n'


def test_a_kernel_that_expands_a_macro_torchs_headers_define_is_never_judged_without_them():
    # A syntax error can be one only because a macro of torch's headers is missing (it would expand differently).
    uses = "#define CHECK(x) TORCH_CHECK(x)\n__global__ void k(int x) { CHECK(x); }\n"
    assert device_verdict(SYNTAX, len(_CUDA_PRELUDE), lambda: NONE_DECLARED, uses) is None
    # The same macro spelled in a define no kernel expands changes nothing (KernelBench's CHECK_CUDA lines).
    unused = "#define CHECK(x) TORCH_CHECK(x)\n__global__ void k(int x) { x; }\n"
    assert device_verdict(SYNTAX, len(_CUDA_PRELUDE), lambda: NONE_DECLARED, unused) is not None


def test_without_the_names_of_torchs_headers_nothing_is_judged():
    assert device_verdict(SYNTAX, len(_CUDA_PRELUDE), lambda: None, "__global__ void k();") is None


def test_the_names_are_not_computed_for_errors_that_are_not_the_candidates():
    def never() -> TorchNames:
        raise AssertionError("asked for the names of an error in musaenv's own lines")

    assert device_verdict('musaenv_device.cu(40): error: expected a ")"\n', 3, never, "") is None
    assert device_verdict('cuda.cu(12): error: explicit type is missing ("int" assumed)\n', 3, never, "") is None


def test_a_template_kernels_error_seen_through_its_shims_instances_is_the_verdict():
    # nvcc 13's shape (measured): the error in the candidate's line, the context lines in the device unit's own, where
    # the shims instantiate exactly the types the unsplit unit's dispatch does (double, float).
    out = (
        'cuda.cu(8): error: declaration is incompatible with previous "s" (declared at line 8)\n'
        "      extern __attribute__((shared)) scalar_t s[];\n          detected during:\n"
        '            instantiation of "void red_kernel(const scalar_t *, scalar_t *, int) [with scalar_t=float]" at'
        " line 31 of musaenv_device.cu\n"
        '            instantiation of "void musaenv_launch_red_kernel(dim3, dim3, size_t, cudaStream_t, const'
        ' scalar_t *, scalar_t *, int) [with scalar_t=float]" at line 33 of musaenv_device.cu\n\n'
        '1 error detected in the compilation of "musaenv_device.cu".\n'
    )
    own = device_verdict(out, len(_CUDA_PRELUDE), lambda: NONE_DECLARED, "")
    assert own is not None and 'compilation of "cuda.cu"' in own
    # musaenv's lines in any other part of the message (an error located there, a note pointing there): not judged
    elsewhere = out.replace("declared at line 8", "declared at line 31 of musaenv_device.cu")
    assert device_verdict(elsewhere, len(_CUDA_PRELUDE), lambda: NONE_DECLARED, "") is None
    in_shim = 'musaenv_device.cu(33): error: expected a ")"\n\n1 error detected in the compilation of "x".\n'
    assert device_verdict(in_shim, len(_CUDA_PRELUDE), lambda: NONE_DECLARED, "") is None


@pytest.mark.slow
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_a_template_kernel_under_at_dispatch_builds_through_the_split(bound, tmp_path):
    from tests.unit.toolchains.cuda.test_cuda_split import KB_TEMPLATE

    spec, name = _spec(KB_TEMPLATE)
    res = cuda_fast_build(spec, name, tmp_path, pch_cache_root())
    assert res is not None and res.ok and res.kernels == ("add_kernel",), res
    # A syntax error in the template is one whatever instantiates it: the verdict.
    spec, name = _spec(KB_TEMPLATE.replace("a[idx] + b[idx];", "a[idx] + b[idx] +;"))
    (tmp_path / "b").mkdir()
    res = cuda_fast_build(spec, name, tmp_path / "b", pch_cache_root())
    assert res is not None and not res.ok and "expected an expression" in res.log, res
    # An error that only instantiating it shows, seen through the shims' instantiations of double and float (the
    # types AT_DISPATCH_FLOATING_TYPES instantiates in the unsplit unit): the verdict too, in cuda.cu's lines.
    spec, name = _spec(KB_TEMPLATE.replace("a[idx] + b[idx];", "a[idx].x + b[idx];"))
    (tmp_path / "c").mkdir()
    res = cuda_fast_build(spec, name, tmp_path / "c", pch_cache_root())
    assert res is not None and not res.ok and "must have class type" in res.log, res
    assert "cuda.cu(" in res.log and 'compilation of "musaenv_device.cu"' not in res.log, res.log


@pytest.mark.slow
@pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc")
def test_a_template_kernel_that_asserts_is_judged_by_its_own_error(bound, tmp_path):
    # The corpus's problem_47_sample_3 shape: ``assert`` (which torch's headers leave defined as the device unit's
    # <cassert> does; glibc undefines it only inside assert.h) beside an ``extern __shared__ scalar_t`` array that
    # the double and float instances declare incompatibly: the split's verdict, not the full check.
    from tests.unit.toolchains.cuda.test_cuda_split import KB_TEMPLATE

    body = "extern __shared__ scalar_t s[];\n    assert(size >= 0);\n    int idx"
    spec, name = _spec(KB_TEMPLATE.replace("int idx", body, 1))
    res = cuda_fast_build(spec, name, tmp_path, pch_cache_root())
    assert res is not None and not res.ok, res
    assert 'declaration is incompatible with previous "s"' in res.log and res.log.startswith("== cuda: "), res.log
