"""CUDA -> MUSA porting: golden files, idempotence, token boundaries, warnings and the CLI."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from musaenv import _env
from musaenv.backends import musa_port, musa_tables
from musaenv.backends.musa_port import add_port_subparser, main, port_file, port_source
from musaenv.errors import ConfigError

DATA = Path(__file__).resolve().parents[2] / "data" / "port"
PAIRS = sorted((src, next(DATA.glob(src.name.split(".cuda.")[0] + ".musa.*"))) for src in DATA.glob("*.cuda.*"))


def test_there_are_golden_pairs_for_each_input_shape() -> None:
    names = {src.name for src, _ in PAIRS}
    assert len(PAIRS) >= 5
    assert "raw_vector_add.cuda.cu" in names and "reference_program.cuda.py" in names


@pytest.mark.parametrize(("src", "golden"), PAIRS, ids=[s.name for s, _ in PAIRS])
def test_port_matches_golden_file(src: Path, golden: Path) -> None:
    result = port_file(src)
    assert result.text == golden.read_text(encoding="utf-8")
    assert result.rewrites, "every golden input has something to port"


@pytest.mark.parametrize(("src", "golden"), PAIRS, ids=[s.name for s, _ in PAIRS])
def test_porting_twice_equals_porting_once(src: Path, golden: Path) -> None:
    again = port_file(golden)
    assert again.text == golden.read_text(encoding="utf-8")
    assert again.rewrites == ()


def test_raw_cu_keeps_the_kernel_language() -> None:
    ported = port_file(DATA / "raw_vector_add.cuda.cu").text
    for kept in (
        "__global__",
        "threadIdx.x",
        "blockIdx.x",
        "<<<(n + 255) / 256, 256>>>",
        "__shfl_down_sync",
        "atomicAdd",
        "__half2float",
        "CUDA_CHECK(",
    ):
        assert kept in ported
    assert not re.search(r"\bcuda[A-Z_]|__nv_", ported)


def test_only_whole_known_identifiers_are_renamed() -> None:
    src = "int cudaMallocXYZ = 0; void my_add_cuda(); cudaMalloc(&p, 4); xcudaFree(p); cudaFree_(p);\n"
    result = port_source(src, kind="cuda")
    assert result.text == "int cudaMallocXYZ = 0; void my_add_cuda(); musaMalloc(&p, 4); xcudaFree(p); cudaFree_(p);\n"
    assert {w.construct for w in result.warnings} == {"cudaMallocXYZ", "cudaFree_"}


def test_escaped_newlines_in_python_strings_are_seen_as_line_breaks() -> None:
    src = 'src = "#include <cuda_runtime.h>\\n__global__ void k() {}\\nvoid f() { cudaDeviceSynchronize(); }"\n'
    ported = port_source(src).text
    assert ported == (
        'src = "#include <musa_runtime.h>\\n__global__ void k() {}\\nvoid f() { musaDeviceSynchronize(); }"\n'
    )


def test_python_device_rules() -> None:
    src = (
        "import torch\n"
        "x = torch.ones(2, device='cuda:1').cuda()\n"
        "y = x.to(f'cuda:{0}') if torch.cuda.is_available() else x\n"
        "names = ['cuda_sources', 'cudaless']\n"
    )
    ported = port_source(src).text
    assert ported == (
        "import torch\n"
        "import torch_musa\n"
        "x = torch.ones(2, device='musa:1').musa()\n"
        "y = x.to(f'musa:{0}') if torch.musa.is_available() else x\n"
        "names = ['cuda_sources', 'cudaless']\n"
    )


def test_import_torch_musa_goes_after_the_leading_imports_without_import_torch() -> None:
    src = '"""Doc."""\nfrom __future__ import annotations\nfrom torch.utils.cpp_extension import load_inline\nX = 1\n'
    ported = port_source(src).text
    assert ported == (
        '"""Doc."""\nfrom __future__ import annotations\n'
        "from torch_musa.utils.musa_extension import load_inline\nimport torch_musa\nX = 1\n"
    )


def test_a_pure_cpu_program_is_left_alone() -> None:
    src = "import torch\n\ndef f(x):\n    return torch.relu(x)\n"
    result = port_source(src)
    assert result.text == src and result.rewrites == () and result.warnings == ()


def test_unmappable_apis_are_kept_and_warned_with_their_line() -> None:
    src = (
        "#include <mma.h>\n"
        "using namespace nvcuda;\n"
        "__global__ void k(unsigned* out) {\n"
        '    asm volatile("mov.u32 %0, %%laneid;" : "=r"(out[0]));\n'
        "    cudnnHandle_t h;\n"
        "}\n"
        "void launch() { cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, args, 0); }\n"
    )
    result = port_source(src, kind="cuda")
    by_construct = {w.construct: w.line for w in result.warnings}
    assert by_construct == {"mma.h": 1, "nvcuda": 2, "asm": 4, "cudnnHandle_t": 5, "cuLaunchKernel": 7}
    assert 'asm volatile("mov.u32 %0, %%laneid;"' in result.text
    assert "cuLaunchKernel(" in result.text and "#include <mma.h>" in result.text
    assert "mudnnHandle_t h;" in result.text  # renamed as torch_musa's tables do, but flagged


def test_nvcc_flags_and_torch_backends_are_warned_not_rewritten() -> None:
    src = (
        "import torch\n"
        "from torch.utils.cpp_extension import load_inline\n"
        "torch.backends.cudnn.benchmark = True\n"
        "m = load_inline(name='m', cpp_sources='', cuda_sources='', extra_cuda_cflags=['-arch=sm_90', '-O3'])\n"
    )
    result = port_source(src)
    assert {(w.line, w.construct) for w in result.warnings} == {(3, "torch.backends.cudnn"), (4, "-arch=sm_90")}
    assert "torch.backends.cudnn.benchmark" in result.text and "'-arch=sm_90'" in result.text


def test_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(ConfigError, match="kind must be one of"):
        port_source("x", kind="hip")


def test_result_is_json_safe() -> None:
    import json

    result = port_file(DATA / "elementwise_add.cuda.py")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["kind"] == "python"
    assert {"rule": "runtime-api", "before": "cudaSuccess", "after": "musaSuccess", "count": 1} in data["rewrites"]


def test_cli_writes_the_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vector_add.mu"
    assert main(["--to", "musa", str(DATA / "raw_vector_add.cuda.cu"), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == (DATA / "raw_vector_add.musa.mu").read_text(encoding="utf-8")
    assert "cudaMalloc -> musaMalloc" in capsys.readouterr().err


def test_cli_prints_to_stdout_and_reports_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(DATA / "reference_program.cuda.py")]) == 0
    assert capsys.readouterr().out == (DATA / "reference_program.musa.py").read_text(encoding="utf-8")
    assert main([str(tmp_path / "missing.py")]) == 1


def test_subparser_registers_port_with_a_handler() -> None:
    parser = argparse.ArgumentParser(prog="musaenv")
    add_port_subparser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["port", "--to", "musa", "cand.py", "-o", "out.py"])
    assert (args.command, args.file, args.output, args.func) == ("port", "cand.py", "out.py", musa_port.run_port)


@pytest.mark.skipif(_env.cuda_home() is None, reason="no CUDA toolkit (CUDA_HOME or /usr/local/cuda) on this machine")
def test_runtime_name_list_only_holds_real_cuda_names() -> None:
    home = _env.cuda_home()
    assert home is not None
    headers = "".join(p.read_text(errors="ignore") for p in (home / "include").rglob("*.h"))
    known = set(re.findall(r"\bcuda[A-Z]\w*", headers))
    assert sorted(musa_tables.CUDA_RUNTIME_NAMES - known) == []
