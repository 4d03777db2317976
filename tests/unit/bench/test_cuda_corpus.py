"""benchmarks/cuda_corpus.py's pure half: reading a corpus with its upstream labels and which generations the CUDA
split takes (and why not), on a tiny synthetic corpus. No compiler runs here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.cuda_corpus import (
    classify,
    generations_from_files,
    read_directory,
    read_git,
    shares,
    strata,
    why_unsplittable,
)

_KERNEL = r"""
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

_PROGRAM = '''
import torch
from torch.utils.cpp_extension import load_inline

cuda_src = r"""{cuda}"""
cpp_src = "torch::Tensor add(torch::Tensor a, torch::Tensor b);"
ext = load_inline(name="add", cpp_sources=cpp_src, cuda_sources=cuda_src, {functions}extra_cuda_cflags=["-O3"])
'''


_LINKAGE = "linkage the split cannot open (not C, nested, #-lines inside)"


def _program(cuda: str = _KERNEL, functions: str = 'functions=["add"], ') -> str:
    return _PROGRAM.format(cuda=cuda, functions=functions)


def _corpus(root: Path) -> Path:
    """Five generations: one the split takes, one binding its own module, one with ``extern "C++"``, one that is not
    Python, one without ``load_inline``; KernelBench's labels for four of them."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "p1_s1_kernel.py").write_text(_program())
    (root / "p1_s2_kernel.py").write_text(_program(functions=""))
    (root / "p1_s3_kernel.py").write_text(_program(cuda='extern "C++" ' + _KERNEL.lstrip()))
    (root / "p1_s4_kernel.py").write_text("def broken(:\n")
    (root / "p1_s5_kernel.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    labels = [{"solution_id": f"p1_s{i}", "compiled": ok} for i, ok in ((1, True), (2, False), (3, True), (4, False))]
    (root / "eval_results.json").write_text(json.dumps(labels))
    (root / "notes.txt").write_text("not a generation")
    return root


def test_reading_a_directory_labels_each_generation_by_its_solution_id(tmp_path: Path) -> None:
    gens = generations_from_files(read_directory(_corpus(tmp_path / "c")))
    assert [(g.name, g.compiled) for g in gens] == [
        ("p1_s1", True), ("p1_s2", False), ("p1_s3", True), ("p1_s4", False), ("p1_s5", None)
    ]  # fmt: skip


def test_reading_a_git_dir_at_a_commit_gives_the_same_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _corpus(repo / "runs" / "r")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "corpus"], check=True)
    files = read_git(repo / ".git", "HEAD", "runs/r")
    assert files == {f"runs/r/{k}": v for k, v in read_directory(repo / "runs" / "r").items()}


def test_classification_says_which_the_split_takes_and_why_not(tmp_path: Path) -> None:
    rows = {c.name: c for c in map(classify, generations_from_files(read_directory(_corpus(tmp_path / "c"))))}
    assert rows["p1_s1"].fast and rows["p1_s1"].reason is None
    assert rows["p1_s1"].kwargs[0]["functions"] == ["add"] and rows["p1_s1"].kwargs[0]["extra_cuda_cflags"] == ["-O3"]
    assert not rows["p1_s2"].fast and "functions=" in (rows["p1_s2"].reason or "")
    assert rows["p1_s3"].reason == f"not splittable: {_LINKAGE}"
    assert rows["p1_s4"].reason == "python syntax error" and rows["p1_s5"].reason == "no load_inline call"


def test_shares_count_over_all_and_over_the_upstream_compiled(tmp_path: Path) -> None:
    rows = [classify(g) for g in generations_from_files(read_directory(_corpus(tmp_path / "c")))]
    got = shares(rows)
    assert (got["all"]["generations"], got["all"]["recoverable"], got["all"]["fast"]) == (5, 3, 1)
    assert got["all"]["unrecoverable"] == {"python syntax error": 1, "no load_inline call": 1}
    up = got["compiled_upstream"]
    assert (up["generations"], up["fast"], up["fast_share"]) == (2, 1, pytest.approx(0.5))
    assert up["reasons"] == {f"not splittable: {_LINKAGE}": 1}


def test_a_call_torchs_signature_refuses_reaches_no_build_and_is_counted_apart(tmp_path: Path) -> None:
    # KernelBench generations that leave out cpp_sources: torch's load_inline raises TypeError before any build
    # (musaenv's hook the same), so no tier builds them; the share over calls that reach a build leaves them out.
    root = _corpus(tmp_path / "c")
    (root / "p1_s6_kernel.py").write_text(_program().replace("cpp_sources=cpp_src, ", ""))
    (root / "p1_s7_kernel.py").write_text(_program().replace("extra_cuda_cflags", "extra_cuda_flags"))
    (root / "p1_s8_kernel.py").write_text(_program().replace('name="add", cpp_sources=cpp_src', '"add", cpp_src'))
    rows = {c.name: c for c in map(classify, generations_from_files(read_directory(root)))}
    assert "missing a required argument: 'cpp_sources'" in (rows["p1_s6"].reason or "") and not rows["p1_s6"].fast
    assert "unexpected keyword argument 'extra_cuda_flags'" in (rows["p1_s7"].reason or "")
    assert rows["p1_s8"].fast  # by position: bound
    got = shares(list(rows.values()))["all"]
    assert (got["recoverable"], got["builds"], got["fast"]) == (6, 4, 2)
    assert got["fast_share_of_builds"] == pytest.approx(0.5)
    assert got["reasons"]["load_inline refuses the call before any build"] == 2


def test_strata_are_seeded_and_hold_only_their_kind(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    for i in range(6):  # three labelled successes, three failures the split takes
        (root / f"g{i}.py").write_text(_program(cuda=_KERNEL + f"// {i}\n"))
    (root / "eval_results.json").write_text(json.dumps([{"solution_id": f"g{i}", "compiled": i < 3} for i in range(6)]))
    rows = [classify(g) for g in generations_from_files(read_directory(root))]
    ok, bad = strata(rows, seed=1)
    assert sorted(c.name for c in ok) == ["g0", "g1", "g2"] and sorted(c.name for c in bad) == ["g3", "g4", "g5"]
    assert [c.name for c in strata(rows, seed=1)[0]] == [c.name for c in ok]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("#ifdef X\n#endif\n" + _KERNEL, "conditional compilation"),
        ("__global__ void k(torch::Tensor t) {}\n", "torch types in device code"),
        ("namespace ops {\n" + _KERNEL + "}\n", "namespace block"),
        ("template <int N = 2> __global__ void k(float* x) { x[0] = N; }\n", "template kernel of another shape"),
        ('extern "C++" {\n' + _KERNEL + "}\n", _LINKAGE),
        (
            "template <typename T> " + _KERNEL.lstrip(),
            "launch the split cannot read (template arguments left to deduction)",
        ),
        (
            "template <typename T> " + _KERNEL.lstrip().replace("add_kernel<<<", "add_kernel<T><<<"),
            "launch the split cannot read (template arguments <T>)",
        ),
        ("int f() { return 1; }\n", "no kernel"),
    ],
)
def test_why_a_source_is_not_split(source: str, reason: str) -> None:
    assert why_unsplittable(source) == reason


def _timed(stratum: str, plain_cpu: float, ours_cpu: float, cached_cpu: float, infra: bool = False) -> dict:
    def run(cpu: float, **extra: object) -> dict:
        return {"cpu_s": cpu, "process_wall_s": cpu * 2, **extra}

    ours = run(ours_cpu, tier="cuda_split", infra=infra)
    return {"stratum": stratum, "load_inline_first": run(plain_cpu), "load_inline_cached": run(1.0),
            "musaenv_first": ours, "musaenv_cached": run(cached_cpu)}  # fmt: skip


def test_summary_takes_medians_per_stratum_and_leaves_infrastructure_errors_out() -> None:
    from benchmarks.cuda_corpus_time import summarize

    rows = [_timed("success", 80.0, 8.0, 0.5), _timed("success", 60.0, 6.0, 0.5), _timed("success", 70.0, 20.0, 0.5)]
    rows += [_timed("kernel_error", 50.0, 4.0, 0.2), _timed("kernel_error", 40.0, 100.0, 90.0, infra=True)]
    got = summarize(rows)
    assert got["success"]["musaenv_first_cpu_s"] == 8.0 and got["success"]["load_inline_first_cpu_s"] == 70.0
    assert (got["kernel_error"]["n"], got["kernel_error"]["infra_error"]) == (1, 1)
    assert got["ratios"]["first_cpu_success"] == pytest.approx(70 / 8, abs=0.01)
    assert got["ratios"]["first_cpu_median_of_ratios"] == 10.0  # of 10x, 10x and 3.5x
    assert got["ratios"]["error_over_success_cpu"] == 0.5 and got["ratios"]["cached_cpu_vs_load_inline_first"] == 140.0
