"""Build flags a candidate may pass to ``load_inline``: torch's normalisation, then an allow-list.

**Normalisation is torch's.** ``torch.utils.cpp_extension`` strips every flag, joins each list with spaces into
a ninja variable, and ninja hands the command to ``/bin/sh``, which splits it again. So ``[""]`` (KernelBench's
prompt idiom) passes nothing and ``["-O3 -ffast-math"]`` passes two flags. :func:`normalise_flags` gives the same
tokens without a shell (:func:`shlex.split` follows the shell's word splitting and quoting).

**Then an allow-list** (HACKS.md "the build is an attack surface"): a flag that is not a plain optimisation,
language, ISA, warning or macro option can make the compiler driver run a program of the candidate's choosing
(GCC's ``-wrapper``, ``-B``, ``-fplugin``, ``-specs``), read or write files (``@file``, ``-o``, ``-MF``,
``-save-temps``) or link code from anywhere (``-L``, ``-Wl,...``). Anything not listed is refused before any
compiler runs, with a message naming the flag and the allowed set (a ``format_error``: the response asked for a
build musaenv does not perform). Macro values are limited to characters no shell or driver treats specially, so
even torch's own ``load_inline`` (which goes through ``/bin/sh``) never sees candidate text it would interpret.

A flag meant for the other compiler (``--use_fast_math`` among the host flags) is allowed: it is harmless and the
compiler's own error is the verdict torch would give.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["ALLOWED_SUMMARY", "FlagProblem", "check_spec_flags", "normalise_flags", "refused_flags"]

_MACRO = r"[A-Za-z_]\w*(=[\w.+\-]*)?"
_HOST = [
    r"-O[0-3sgz]?|-Ofast",
    r"-std=(c|gnu)\+\+(0x|11|14|17|1y|1z|20|2a|23|2b|26|2c)",
    r"-m(arch|tune)=[a-z0-9_.\-]+",
    r"-m(no-)?(avx\w*|fma4?|f16c|sse[\w.]*|ssse3|bmi2?|popcnt|lzcnt|amx-\w+|prefer-vector-width=\d+)",
    r"-f(no-)?(fast-math|unroll-loops|unroll-all-loops|openmp|openmp-simd|strict-aliasing|tree-vectorize"
    r"|tree-loop-vectorize|tree-slp-vectorize|omit-frame-pointer|inline-functions|PIC|pic|exceptions|rtti"
    r"|finite-math-only|associative-math|reciprocal-math|unsafe-math-optimizations|math-errno|trapping-math"
    r"|signed-zeros|prefetch-loop-arrays|peel-loops|ipa-pta|vect-cost-model|permissive|diagnostics-color"
    r"|visibility-inlines-hidden|vectorize|slp-vectorize)",
    r"-ffp-contract=(fast|on|off)",
    r"-fvisibility=(hidden|default)",
    r"-fvect-cost-model=(unlimited|dynamic|cheap|very-cheap)",
    r"-fdiagnostics-color=(always|never|auto)",
    rf"-D{_MACRO}|-U[A-Za-z_]\w*",
    r"-W(no-)?(error=)?[a-z0-9][a-z0-9+\-]*(=\d+)?",  # warnings; the comma forms (-Wl, -Wa, -Wp) do not match
    r"-w|-pedantic|-pedantic-errors|-pthread|-g[0-3]?|-shared|-fPIC",
    r"--?use_fast_math|--?use-fast-math",  # nvcc spellings: the host compiler's own error is torch's verdict
]
_CUDA_ONLY = [
    r"-lineinfo|--?expt-relaxed-constexpr|--?expt-extended-lambda|--?extended-lambda|-res-usage|--resource-usage",
    r"--?restrict|-allow-unsupported-compiler|--allow-unsupported-compiler",
    r"(-arch|--gpu-architecture|-code|--gpu-code)=(sm|compute|lto)_\d+[af]?(,(sm|compute|lto)_\d+[af]?)*",
    r"(-gencode|--generate-code)=arch=compute_\d+[af]?,code=\[?(sm|compute)_\d+[af]?(,(sm|compute)_\d+[af]?)*\]?",
    r"(-maxrregcount|--maxrregcount)=\d+",
    r"(-ftz|-prec-div|-prec-sqrt|-fmad|--ftz|--prec-div|--prec-sqrt|--fmad)=(true|false)",
    r"(-t|--threads)=?\d+",
    r"(-Xptxas|--ptxas-options)=(-v|--verbose|-O[0-3]|--warn-on-spills|-warn-spills|-dlcm=c[ag])"
    r"(,(-v|--verbose|-O[0-3]|--warn-on-spills|-warn-spills|-dlcm=c[ag]))*",
    r"--?ptxas-options=-v",
]
_LIBS = (
    "m", "pthread", "gomp", "dl", "rt", "stdc++", "c10", "torch", "torch_cpu", "torch_python", "c10_cuda",
    "torch_cuda", "cuda", "cudart", "cublas", "cublasLt", "curand", "cufft", "cusparse", "cusolver", "nvrtc",
)  # fmt: skip
_LINK = [
    r"-l(" + "|".join(re.escape(x) for x in _LIBS) + r")",
    r"-O[0-3]?|-fopenmp|-pthread|-shared|-s",
    r"-Wl,(--as-needed|--no-as-needed|-O[0-3]|--gc-sections|-s|--strip-all|-z,(now|relro|noexecstack))",
]
# Options whose argument is the next token (``-D NAME``, ``-Xptxas -v``, ``-gencode arch=...``).
_JOINABLE = {
    "-D": "-D", "-U": "-U", "-Xptxas": "-Xptxas=", "--ptxas-options": "--ptxas-options=", "-gencode": "-gencode=",
    "--generate-code": "--generate-code=", "-arch": "-arch=", "-maxrregcount": "-maxrregcount=",
    "-Xcompiler": "-Xcompiler=", "--compiler-options": "-Xcompiler=",
}  # fmt: skip

_HOST_RE = re.compile("|".join(f"(?:{p})" for p in _HOST))
_CUDA_RE = re.compile("|".join(f"(?:{p})" for p in _HOST + _CUDA_ONLY))
_LINK_RE = re.compile("|".join(f"(?:{p})" for p in _LINK))

ALLOWED_SUMMARY = (
    "optimisation (-O0..-O3, -Os, -Ofast), -std=c++NN/gnu++NN, -march=/-mtune=, ISA options (-mavx2, -mfma, "
    "-mavx512*, -msse*, ...), math and loop options (-ffast-math, -funroll-loops, -fopenmp, -ffp-contract=, ...), "
    "macros (-DNAME[=value of letters, digits, _ . + -], -UNAME), warnings (-W..., -w), -g, -pthread; nvcc also "
    "--use_fast_math, -lineinfo, --expt-relaxed-constexpr, --extended-lambda, -arch=sm_NN, -gencode=arch=...,"
    "code=..., -maxrregcount=N, -Xptxas -v/-O3, -Xcompiler <allowed host flags>; linker: -l"
    + "/-l".join(_LIBS[:6])
    + " and the CUDA/torch libraries, -fopenmp, -Wl,--as-needed; include paths: none beyond torch's and CUDA's"
)


@dataclass(frozen=True)
class FlagProblem:
    """A flag the allow-list refuses.

    Attributes:
        argument: The ``load_inline`` argument it came from (``extra_cflags``, ...).
        flag: The token as the compiler would have seen it.
    """

    argument: str
    flag: str

    def message(self) -> str:
        """A sentence for the candidate's feedback."""
        return f"build flag {self.flag!r} in {self.argument} is not allowed; allowed: {ALLOWED_SUMMARY}"


def normalise_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """torch's view of a flag list: each stripped, joined with spaces, split as ``/bin/sh`` splits words.

    Raises:
        ValueError: unbalanced quotes (the shell would fail the whole build command).
    """
    joined = " ".join(f.strip() for f in flags)
    return tuple(shlex.split(joined)) if joined.strip() else ()


def _joined(tokens: Sequence[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in _JOINABLE and i + 1 < len(tokens):
            out.append(_JOINABLE[tok] + tokens[i + 1])
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def _cuda_ok(tok: str) -> bool:
    for prefix in ("-Xcompiler=", "--compiler-options="):
        if tok.startswith(prefix):  # host flags forwarded through nvcc: each must be an allowed host flag
            parts = [p for p in tok[len(prefix) :].split(",") if p]
            return bool(parts) and all(_HOST_RE.fullmatch(p) for p in parts)
    return _CUDA_RE.fullmatch(tok) is not None


def refused_flags(argument: str, flags: Sequence[str]) -> list[FlagProblem]:
    """Flags of one ``load_inline`` argument (already normalised) that the allow-list refuses."""
    tokens = _joined(flags)
    if argument == "extra_ldflags":
        return [FlagProblem(argument, t) for t in tokens if not _LINK_RE.fullmatch(t)]
    if argument == "extra_cuda_cflags":
        return [FlagProblem(argument, t) for t in tokens if not _cuda_ok(t)]
    return [FlagProblem(argument, t) for t in tokens if not _HOST_RE.fullmatch(t)]


def _allowed_include_dirs() -> set[str]:
    """Include directories torch adds anyway (its own and CUDA's): naming them changes nothing."""
    dirs: set[str] = set()
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    dirs.update({os.path.join(cuda, "include"), "/usr/local/cuda/include"})
    spec = importlib.util.find_spec("torch")  # located, not imported: the parent need not load torch for this
    if spec is not None and spec.origin:
        inc = os.path.join(os.path.dirname(spec.origin), "include")
        dirs.update({inc, os.path.join(inc, "torch", "csrc", "api", "include")})
    return {os.path.realpath(d) for d in dirs}


def check_spec_flags(
    cflags: Sequence[str], cuda_cflags: Sequence[str], ldflags: Sequence[str], include_paths: Sequence[str]
) -> list[FlagProblem]:
    """Every refused flag and include path of one build (arguments already normalised)."""
    problems = refused_flags("extra_cflags", cflags)
    problems += refused_flags("extra_cuda_cflags", cuda_cflags)
    problems += refused_flags("extra_ldflags", ldflags)
    if include_paths:
        allowed = _allowed_include_dirs()
        problems += [FlagProblem("extra_include_paths", p) for p in include_paths if os.path.realpath(p) not in allowed]
    return problems
