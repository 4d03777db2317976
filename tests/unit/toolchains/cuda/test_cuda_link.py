"""How the compile-only check judges the linker's output (the link itself runs in tests/fidelity)."""

from __future__ import annotations

from pathlib import Path

from musaenv.toolchains.cuda.link import LinkPlan, judge_link, link_plan

STUBBED = LinkPlan(["c++", "main.o", "-lpython3.11", "-o", "x.so"], ("c10_cuda", "torch_cuda", "cublas"), ())

STUB_ONLY = """/usr/bin/ld: cuda.o: in function `relu_forward(at::Tensor)':
tmpxft_0_cuda.cudafe1.cpp:(.text+0xcb): undefined reference to `c10::cuda::getCurrentCUDAStream(signed char)'
/usr/bin/ld: cuda.o: in function `c10::cuda::CUDAStream::operator CUstream_st*() const':
x.cpp:(.text+0x14): undefined reference to `c10::cuda::CUDAStream::stream() const'
/usr/bin/ld: x.cpp:(.text+0x20): undefined reference to `cublasSgemm_v2'
collect2: error: ld returned 1 exit status
"""


def test_references_to_absent_libraries_only_pass() -> None:
    assert judge_link(1, STUB_ONLY, STUBBED) == (True, [])
    assert judge_link(0, "", STUBBED) == (True, [])


def test_a_symbol_defined_nowhere_fails_and_is_named() -> None:
    log = STUB_ONLY.replace("collect2", "main.cpp:(.text+0xb0e): undefined reference to `relu_forward'\ncollect2")
    assert judge_link(1, log, STUBBED) == (False, ["relu_forward"])


def test_other_linker_errors_fail_even_without_undefined_symbols() -> None:
    dup = "/usr/bin/ld: cuda.o: in function `f()':\nx.cpp:(.text+0x0): multiple definition of `f()'; main.o: first\n"
    assert judge_link(1, dup + "collect2: error: ld returned 1 exit status\n", STUBBED) == (False, [])
    assert judge_link(None, "", STUBBED) == (False, [])  # killed at the deadline


def test_stubs_apply_only_to_libraries_absent_here() -> None:
    plan = LinkPlan(["c++", "-lpython3.11"], (), ())
    assert judge_link(1, STUB_ONLY, plan)[0] is False


def test_link_plan_is_torchs_link_with_no_undefined(tmp_path: Path) -> None:
    plan = link_plan("c++", ["main.o", "cuda.o"], True, tmp_path, ["-lmusaenv_nosuchlib", "-lcublas"], "x.so")
    cmd = plan.command
    assert cmd[:4] == ["c++", "main.o", "cuda.o", "-shared"] and cmd[-3:] == ["-Wl,--no-undefined", "-o", "x.so"]
    assert "-lc10" in cmd and "-ltorch" in cmd and "-ltorch_python" in cmd and "-lcudart" in cmd
    assert "-lmusaenv_nosuchlib" in cmd  # unknown to musaenv: kept, so the link fails as torch's would
    assert "-lcublas" not in cmd and "cublas" in plan.stubbed  # a CUDA library absent from this toolkit
    assert cmd.index("-lmusaenv_nosuchlib") < cmd.index("-lc10")  # torch puts the user's flags first
