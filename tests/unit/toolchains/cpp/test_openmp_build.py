"""An OpenMP candidate builds through the split tier with the header of its other flags, and runs in parallel.

With the real compilers and torch's headers: ``-O3``'s header is built once (``warmup``, kept in the suite's
cache), then a distinct ``-O3 -fopenmp`` candidate builds with that header, sees the compiler's own ``_OPENMP``,
and its module computes with OpenMP's threads.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from musaenv.toolchains.cpp.compiler import torch_flags
from musaenv.toolchains.cpp.pch import PchStore
from musaenv.toolchains.loader import BuildSpec, build_extension, pch_cache_root
from musaenv.toolchains.warmup import warmup

CPP = r"""
#include <torch/extension.h>
#ifdef _OPENMP
#include <omp.h>
#endif
torch::Tensor relu_omp(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* a = x.data_ptr<float>();
  float* b = y.data_ptr<float>();
  const int64_t n = x.numel();
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
  return y;
}
int64_t omp_info() {
#ifdef _OPENMP
  int threads = 0;
  #pragma omp parallel
  {
    #pragma omp single
    threads = omp_get_num_threads();
  }
  return int64_t(_OPENMP) * 1000 + threads;
#else
  return -1;
#endif
}
"""

CHECK = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
x = torch.randn(4096)
assert torch.equal(m.relu_omp(x), torch.relu(x))
print(m.omp_info())
"""


def _macro(name: str) -> str:
    out = subprocess.run(["g++", "-fopenmp", "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return next(line.split()[2] for line in out.splitlines() if line.startswith(f"#define {name} "))


@pytest.mark.slow
def test_an_openmp_candidate_uses_the_header_of_its_other_flags(tmp_path) -> None:
    assert all(r.get("ok") for r in warmup([("-O3",)], full=False, say=lambda line: None))
    flags = torch_flags(pch_cache_root(), "musaenv_test", ["-O3", "-fopenmp"], [], [])
    store = PchStore(pch_cache_root())
    if store.omp_shared("split", flags) is False:  # decided by the warm-up's check of this torch's header text
        pytest.skip("torch/types.h of this torch depends on -fopenmp: its header keeps OpenMP in the key")
    assert store.omp_shared("split", flags) is True
    assert store.include_flags("split", flags) is not None  # -O3's header serves it
    spec = BuildSpec.from_load_inline({"cpp_sources": CPP + f"// {uuid.uuid4().hex}\n",
                                       "functions": ["relu_omp", "omp_info"], "extra_cflags": ["-O3", "-fopenmp"]},
                                      "cpu")  # fmt: skip
    res = build_extension(spec, timeout_s=600)
    assert res.ok, res.log
    steps = [s.get("step") for s in res.extra.get("steps", [])]
    assert res.extra.get("tier") == "split" and "split_compile" in steps, steps  # with the header, not without
    out = subprocess.run([sys.executable, "-c", CHECK, str(res.so_path), res.name], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    info = int(out.stdout.strip())
    assert info // 1000 == int(_macro("_OPENMP")) and info % 1000 >= 1  # the compiler's own _OPENMP; a team ran
    syms = subprocess.run(["nm", "-D", str(res.so_path)], capture_output=True, text=True, check=True).stdout
    assert "GOMP_parallel" in syms  # the loops really are OpenMP regions


ISA_CPP = r"""
#include <torch/extension.h>
#include <immintrin.h>
#if !defined(__AVX2__) || !defined(__FMA__)
#error the candidate does not see the extensions it asked for
#endif
torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a) {
  auto out = torch::empty_like(x);
  const float* px = x.data_ptr<float>(); const float* py = y.data_ptr<float>(); float* po = out.data_ptr<float>();
  const int64_t n = x.numel();
  const __m256 va = _mm256_set1_ps(float(a));
  int64_t i = 0;
  #pragma omp parallel for
  for (int64_t j = 0; j < n / 8; ++j)
    _mm256_storeu_ps(po + 8 * j, _mm256_fmadd_ps(va, _mm256_loadu_ps(px + 8 * j), _mm256_loadu_ps(py + 8 * j)));
  for (i = n / 8 * 8; i < n; ++i) po[i] = float(a) * px[i] + py[i];
  return out;
}
"""
ISA_CHECK = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
x, y = torch.randn(4099), torch.randn(4099)
torch.testing.assert_close(m.axpy(x, y, 1.5), 1.5 * x + y)
"""


def _has_avx2_fma() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx2" in flags and " fma" in flags


@pytest.mark.slow
@pytest.mark.parametrize("openmp", [False, True])
def test_a_candidate_with_extensions_uses_the_header_of_its_other_flags(tmp_path, openmp: bool) -> None:
    assert all(r.get("ok") for r in warmup([("-O3",)], full=False, say=lambda line: None))
    user = ["-O3", "-mavx2", "-mfma", *(["-fopenmp"] if openmp else [])]
    flags = torch_flags(pch_cache_root(), "musaenv_test", user, [], [])
    store = PchStore(pch_cache_root())
    if store.include_flags("split", flags) is None or not store.isa_shared("split", flags):
        pytest.skip("torch/types.h of this torch (or this compiler) keeps the extensions in the key")
    plain = torch_flags(pch_cache_root(), "musaenv_test", ["-O3"], [], [])
    assert store._dir("split", flags) == store._dir("split", plain)  # -O3's header serves it
    spec = BuildSpec.from_load_inline({"cpp_sources": ISA_CPP + f"// {uuid.uuid4().hex}\n", "functions": ["axpy"],
                                       "extra_cflags": user}, "cpu")  # fmt: skip
    res = build_extension(spec, timeout_s=600)
    assert res.ok, res.log
    steps = [s.get("step") for s in res.extra.get("steps", [])]
    assert res.extra.get("tier") == "split" and "split_compile" in steps, steps  # with the header, not without
    dis = subprocess.run(["objdump", "-d", str(res.so_path)], capture_output=True, text=True, check=True).stdout
    assert "vfmadd" in dis  # the candidate's code has the extensions
    if _has_avx2_fma():
        out = subprocess.run([sys.executable, "-c", ISA_CHECK, str(res.so_path), res.name], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.slow
def test_an_avx_initialiser_the_pragma_cannot_compile_builds_with_the_real_flags(tmp_path) -> None:
    # GCC compiles a namespace-scope initialiser in a function of its own with the command line's target: under the
    # pragma it cannot inline the intrinsic. The fast build sees that the pragma failed, and the real flags decide.
    assert all(r.get("ok") for r in warmup([("-O3",)], full=False, say=lambda line: None))
    user = ["-O3", "-mavx2", "-mfma"]
    flags = torch_flags(pch_cache_root(), "musaenv_test", user, [], [])
    store = PchStore(pch_cache_root())
    if store.include_flags("split", flags) is None or not store.isa_shared("split", flags):
        pytest.skip("torch/types.h of this torch (or this compiler) keeps the extensions in the key")
    source = ISA_CPP.replace(
        "torch::Tensor axpy(", "static const __m256 musaenv_half = _mm256_set1_ps(0.5f);\ntorch::Tensor axpy(", 1
    )
    spec = BuildSpec.from_load_inline({"cpp_sources": source + f"// {uuid.uuid4().hex}\n", "functions": ["axpy"],
                                       "extra_cflags": user}, "cpu")  # fmt: skip
    res = build_extension(spec, timeout_s=600)
    assert res.ok, res.log
    steps = [s.get("step") for s in res.extra.get("steps", [])]
    assert "isa_by_pragma" not in steps and "split_compile_no_pch" in steps, steps  # the retry, with the real flags
