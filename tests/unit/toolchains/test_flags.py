"""Build flags: torch's normalisation (compared with the ninja file torch itself writes) and the allow-list."""

from __future__ import annotations

import inspect
import shlex
import tempfile
from pathlib import Path
from typing import Any

import pytest

from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.flags import check_spec_flags, normalise_flags, refused_flags

# Flag lists the way real generations write them (KernelBench prompt idiom, joined strings, stray spaces).
REAL_LISTS = [
    [""],
    ["-O3"],
    ["-O3 --use_fast_math"],
    [" -O2 ", "", "-march=native -fopenmp"],
    ["-DBLOCK=256", "-D", "TILE=16", "-std=c++17"],
]


def _torch_cflags(extra: list[str]) -> list[str]:
    """The words of the ``cflags`` line torch writes for ``extra`` (as its ninja's /bin/sh would split them)."""
    import torch.utils.cpp_extension as ce

    fn = ce._write_ninja_file_to_build_library
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "main.cpp"
        src.write_text("")
        values: dict[str, Any] = {
            "path": str(Path(d) / "build.ninja"), "name": "m", "sources": [str(src)], "extra_cflags": extra,
            "extra_cuda_cflags": [], "extra_sycl_cflags": [], "extra_ldflags": [], "extra_include_paths": [],
            "with_cuda": False, "with_sycl": False, "verbose": False, "is_standalone": False,
        }  # fmt: skip
        params = inspect.signature(fn).parameters
        fn(**{k: v for k, v in values.items() if k in params})
        line = next(x for x in (Path(d) / "build.ninja").read_text().splitlines() if x.startswith("cflags = "))
    return shlex.split(line.partition(" = ")[2])


@pytest.mark.parametrize("flags", REAL_LISTS, ids=[repr(f) for f in REAL_LISTS])
def test_normalisation_matches_torchs_own_command(flags: list[str]) -> None:
    base = _torch_cflags([])
    ours = list(normalise_flags(flags))
    assert _torch_cflags(flags) == base + ours  # torch appends the user's flags after its own
    spec = BuildSpec.from_load_inline({"cpp_sources": "", "extra_cflags": flags}, "cpu")
    assert list(spec.extra_cflags) == ours


def test_unbalanced_quotes_are_an_error_like_the_shell_gives() -> None:
    with pytest.raises(ValueError):
        normalise_flags(['-DX="a'])


REFUSED = [
    ("extra_cflags", ["-wrapper", "/bin/sh,-c,id"]),
    ("extra_cflags", ["-B/tmp"]),
    ("extra_cflags", ["-fplugin=/tmp/p.so"]),
    ("extra_cflags", ["-specs=/tmp/s"]),
    ("extra_cflags", ["-save-temps"]),
    ("extra_cflags", ["@/tmp/args"]),
    ("extra_cflags", ["-o", "/root/x"]),
    ("extra_cflags", ["-MF", "/tmp/deps"]),
    ("extra_cflags", ["-include", "/etc/passwd"]),
    ("extra_cflags", ["-DX=$(id)"]),
    ("extra_cflags", ["-Wp,-MD,/tmp/x"]),
    ("extra_cuda_cflags", ["-ccbin", "/tmp/cc"]),
    ("extra_cuda_cflags", ["-Xcompiler", "-wrapper,/tmp/w"]),
    ("extra_cuda_cflags", ["--compiler-bindir=/tmp"]),
    ("extra_ldflags", ["-L/tmp"]),
    ("extra_ldflags", ["-Wl,-rpath,/tmp"]),
    ("extra_ldflags", ["-Wl,--wrap=malloc"]),
    ("extra_ldflags", ["-lopenblas"]),
    ("extra_ldflags", ["/tmp/evil.so"]),
]


@pytest.mark.parametrize(("arg", "flags"), REFUSED, ids=[" ".join(f) for _, f in REFUSED])
def test_refused(arg: str, flags: list[str]) -> None:
    problems = refused_flags(arg, normalise_flags(flags))
    assert problems and "not allowed" in problems[0].message()


ALLOWED = [
    ("extra_cflags", ["-O3", "-Ofast", "-march=native", "-mtune=native", "-mavx2", "-mfma", "-mavx512f", "-fopenmp"]),
    (
        "extra_cflags",
        ["-ffast-math", "-funroll-loops", "-std=c++17", "-DN=4", "-UNDEBUG", "-Wall", "-Wno-sign-compare"],
    ),
    ("extra_cflags", ["--use_fast_math"]),  # nvcc's spelling: g++ gives torch's own error for it
    ("extra_cuda_cflags", ["-O3", "--use_fast_math", "-Xptxas", "-O3,-v", "-gencode", "arch=compute_90,code=sm_90"]),
    ("extra_cuda_cflags", ["-arch=sm_80", "--expt-relaxed-constexpr", "-lineinfo", "-Xcompiler", "-fopenmp,-O3"]),
    ("extra_ldflags", ["-lcublas", "-lgomp", "-fopenmp", "-Wl,--as-needed", "-lm"]),
]


@pytest.mark.parametrize(("arg", "flags"), ALLOWED, ids=[" ".join(f) for _, f in ALLOWED])
def test_allowed(arg: str, flags: list[str]) -> None:
    assert refused_flags(arg, normalise_flags(flags)) == []


def test_include_paths_only_torchs_and_cudas() -> None:
    import torch.utils.cpp_extension as ce

    assert check_spec_flags((), (), (), ce.include_paths()[:1]) == []
    assert [p.flag for p in check_spec_flags((), (), (), ["/root", "/usr/include"])] == ["/root", "/usr/include"]
