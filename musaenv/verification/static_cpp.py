"""Static checks of the C++/CUDA/MUSA sources a candidate compiles (HACKS.md S5, S23, T1, T2, T7, T8).

Each source is first run through the system C preprocessor so that macros and token pasting hide nothing
(``#define M(a, b) a##b`` then ``M(at::mat, mul)`` is seen as ``at::matmul``). ``#include`` lines are removed
first (torch's headers are not expanded, the headers are listed and checked by name), and so are conditional
directives, so that every branch of an ``#if`` is seen whatever the real build defines. When a macro is defined
more than once a second pass keeps the first definitions, so an ``#if``/``#else`` pair of macro bodies is seen
both ways. The text without preprocessing is scanned too: a half-written name like ``at::mat`` is caught there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

from musaenv.toolchains.flags import check_spec_flags, normalise_flags, refused_flags
from musaenv.verification import allowlists as al
from musaenv.verification.cpp_text import Lines, directives, lex, mapped_output, run_preprocessor, splice
from musaenv.verification.findings import ERROR, WARNING, Finding, describe
from musaenv.verification.libtorch_symbols import exported_c_symbols, symbol_flag
from musaenv.verification.static_sources import RecoveredBuild

__all__ = ["CppHit", "check_build", "scan_source"]

logger = logging.getLogger(__name__)

_QUAL_RE = re.compile(r"(?<![\w])(?:::\s*)?([A-Za-z_]\w*(?:\s*::\s*(?:template\s+)?~?[A-Za-z_]\w*)+)")
_METHOD_RE = re.compile(r"(?:\.|->)\s*(?:template\s+)?([A-Za-z_]\w*)\s*(?:<[^;(){}]*?>)?\s*\(")
_ID_RE = re.compile(r"[A-Za-z_]\w*")
_USING_NS_RE = re.compile(r"\busing\s+namespace\s+((?:::\s*)?\w+(?:\s*::\s*\w+)*)\s*;")
_NS_ALIAS_RE = re.compile(r"\bnamespace\s+(\w+)\s*=\s*((?:::\s*)?\w+(?:\s*::\s*\w+)*)\s*;")
_DEF_RE = re.compile(r"\b(\w+)\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:const\s*)?(?:noexcept\s*)?\{")
_LAMBDA_RE = re.compile(r"\b(\w+)\s*=\s*\[")
_VECTORIZED_RE = re.compile(r"\bVectorized\s*<|\bvec::")
# Methods of ATen's header-only SIMD type at::vec::Vectorized<T> that share a name with a Tensor method.
_VEC_METHODS = frozenset(
    re.findall(
        r"\w+",
        "abs angle acos asin atan atan2 ceil copysign cos cosh erf erfc erfinv exp exp2 expm1 floor fmod frac hypot "
        "i0 igamma lgamma log log10 log1p log2 max min neg nextafter pow reciprocal round rsqrt sigmoid sin sinh "
        "sqrt tan tanh trunc clamp clamp_max clamp_min maximum minimum eq ne gt ge lt le fmadd sum",
    )
)
_ASM_RE = re.compile(r"\b(?:asm|__asm__|__asm)\b")
_STRING_FLAGS = (
    (re.compile(r"\b(?:cublas|cudnn|mublas|mudnn|cblas_|mkl_|libcublas|libcudnn)\w*", re.I), "vendor_library"),
    # Inside an asm template (a string once comments are gone): entering the kernel without libc.
    (re.compile(r"\b(?:syscall|sysenter)\b|\bint\s+\$?0x80\b|\bsvc\s+#?0\b"), "raw_syscall"),
    (re.compile(r"\baten::\w+"), "library_compute"),
)


@dataclass(frozen=True)
class CppHit:
    """One finding inside a C++ source, before it is tied to the Python file.

    Attributes:
        flag: Finding flag.
        symbol: The construct found (used to report each construct once).
        line: 1-based line inside the source text, ``None`` when unknown.
        detail: What it is and why it matters, one clause.
        severity: ``error`` unless the construct is only a warning whatever the policy.
    """

    flag: str
    symbol: str
    line: int | None
    detail: str
    severity: str = ERROR


def _check_include(rest: str, line: int) -> Iterator[CppHit]:
    m = re.match(r'[<"]([^>"]*)[>"]', rest)
    if m is None:
        yield CppHit("computed_include", rest, line, f"#include {rest} is a computed include that cannot be checked")
        return
    header = m.group(1).strip()
    for pattern, flag in al.CPP_HEADER_FLAGS:
        if pattern.search(header):
            yield CppHit(flag, f"<{header}>", line, f"#include <{header}>: {describe(flag)}")
            return


def _torch_name(rest: str) -> tuple[str, str] | None:
    """(flag, detail) for ``at::<rest>`` (MUSA spelled as CUDA), or ``None`` when it is plumbing."""
    norm = rest.replace("musa", "cuda").replace("MUSA", "CUDA")
    for key, flag in al.CPP_TORCH_SPECIAL.items():
        if norm == key or norm.startswith(key + "::"):
            return flag, describe(flag)
    if norm in al.CPP_TORCH_PLUMBING or norm.startswith(al.CPP_TORCH_PLUMBING_PREFIXES):
        return None
    if norm.startswith("Tensor::"):  # &at::Tensor::matmul: judged like a method call
        return ("library_compute", "ATen/torch library compute") if _compute_method(norm[8:]) else None
    if "::" not in norm and (norm[:1].isupper() or re.fullmatch(r"k[A-Z]\w*", norm)):
        return None
    return "library_compute", "ATen/torch library compute"


def _compute_method(name: str) -> bool:
    """A tensor method that is compute, also behind dispatch prefixes (``__dispatch_mm``, ``_mm``)."""
    bare = re.sub(r"^_+(?:dispatch_)?", "", name)
    return al.is_compute_name(name) or al.is_compute_name(bare)


def _qualified(name: str, aliases: dict[str, str]) -> tuple[str, str] | None:
    """(flag, detail) for a qualified name, after namespace aliases, or ``None`` when it is fine."""
    parts = name.split("::")
    if parts[0] in aliases:
        parts = aliases[parts[0]].split("::") + parts[1:]
    root, rest = parts[0], "::".join(parts[1:])
    if root in al.CPP_TORCH_NAMESPACES:
        return _torch_name(rest)
    full = "::".join(parts)
    if root == "std":
        for key, flag in al.CPP_STD_BANS.items():
            if full == key or full.startswith(key + "::"):
                return flag, describe(flag)
        return None
    if root in al.CPP_VENDOR_NAMESPACES or (root == "musa" and parts[1:2] == ["dnn"]):
        return "vendor_library", "vendor library"
    if root == "thrust" and parts[1] not in al.CPP_THRUST_OK:
        return "vendor_library", "Thrust algorithm (vendor library)"
    if root in ("cub", "hipcub") and parts[1].startswith("Device"):
        return "vendor_library", "CUB device-wide algorithm (vendor library)"
    if root in ("py", "pybind11") and parts[-1] in al.CPP_PYBIND_DYNAMIC:
        return "dynamic_code", "calls back into the Python interpreter"
    return None


def _context(code: str, start: int) -> str:
    """What precedes the token at ``start``: ``member`` (``.x``/``->x``), ``qualified`` (``ns::x``) or ``free``.

    ``::x`` and ``word ::x`` (``return ::system(...)``) count as free: that is the global namespace.
    """
    i = start - 1
    while i >= 0 and code[i] in " \t\n":
        i -= 1
    if i >= 0 and (code[i] == "." or code[i - 1 : i + 1] == "->"):
        return "member"
    if i >= 1 and code[i - 1 : i + 1] == "::":
        before = code[i - 2] if i >= 2 else " "
        return "qualified" if before.isalnum() or before in "_>" else "free"
    return "free"


def defined_names(code: str) -> set[str]:
    """Functions defined (``name(...) {``) and lambdas or callables bound to a name (``name = [``) in ``code``."""
    return {d.group(1) for d in _DEF_RE.finditer(code)} | {d.group(1) for d in _LAMBDA_RE.finditer(code)}


def _scan_names(code: str, line_of: Lines, known: frozenset[str] = frozenset()) -> Iterator[CppHit]:
    """Identifier-level checks on code without comments and strings."""
    aliases = {m.group(1): re.sub(r"\s|^::", "", m.group(2)) for m in _NS_ALIAS_RE.finditer(code)}
    for m in _QUAL_RE.finditer(code):
        if re.search(r"\bnamespace\s*(?:::\s*)?$", code[max(0, m.start() - 40) : m.start(1)]):
            continue  # ``using namespace torch::indexing;`` names a namespace; the calls are judged elsewhere
        parts = re.sub(r"\s+|template\s+", "", m.group(1)).split("::")
        # Every suffix too: ``return ::at::mm`` and ``MACRO at::mm`` match with the word before as first part.
        for i in range(len(parts) - 1):
            name = "::".join(parts[i:])
            verdict = _qualified(name, aliases)
            if verdict is not None:
                flag, what = verdict
                yield CppHit(flag, name, line_of(m.start(1)), f"{name}: {what}")
                break
    vectorized = _VECTORIZED_RE.search(code) is not None
    threads = re.search(r"\bstd\s*::\s*j?thread\b|\bthread\s*\(", code) is not None  # Tensor.detach() is plumbing
    for m in _METHOD_RE.finditer(code):
        method = m.group(1)
        if vectorized and method in _VEC_METHODS:
            # at::vec::Vectorized has the same method names as Tensor; which one this is needs types, so the
            # runtime profiler (which sees every aten call) decides instead of a refusal here.
            detail = f".{method}(): a Vectorized or a Tensor method; left to the runtime profiler"
            yield CppHit("library_compute", f".{method}()", line_of(m.start(1)), detail, WARNING)
        elif _compute_method(method):
            yield CppHit("library_compute", f".{method}()", line_of(m.start(1)), f".{method}(): tensor compute op")
        elif method == "attr":
            yield CppHit("dynamic_code", ".attr()", line_of(m.start(1)), ".attr(): calls back into Python objects")
        elif method == "detach" and threads:  # threads are allowed only when joined before the call returns
            detail = ".detach(): a detached thread outlives the call (deferred work); join threads before returning"
            yield CppHit("thread_or_process", ".detach()", line_of(m.start(1)), detail)
    using_torch = any(
        re.sub(r"\s|^::", "", u.group(1)).split("::")[0] in al.CPP_TORCH_NAMESPACES for u in _USING_NS_RE.finditer(code)
    )
    defined = defined_names(code) | known
    for m in _ID_RE.finditer(code):
        yield from _check_identifier(code, m, line_of, using_torch, defined)
    for m in _ASM_RE.finditer(code):
        yield CppHit("inline_asm", "asm", line_of(m.start()), "inline asm: not checked statically", WARNING)


def _check_identifier(
    code: str, m: re.Match[str], line_of: Lines, using_torch: bool, defined: set[str]
) -> Iterator[CppHit]:
    word = m.group(0)
    for pattern, flag in al.CPP_NAME_PATTERNS:
        if pattern.fullmatch(word):
            yield CppHit(flag, word, line_of(m.start()), f"{word}: {describe(flag)}")
            return
    ctx = _context(code, m.start())
    if ctx != "free":
        return
    if word in exported_c_symbols() and word not in defined:
        flag = symbol_flag(word)
        yield CppHit(flag, word, line_of(m.start()), f"{word}: exported by torch's libraries; {describe(flag)}")
        return
    if word in al.CPP_NAME_BANS:
        flag = al.CPP_NAME_BANS[word]
        yield CppHit(flag, word, line_of(m.start()), f"{word}: {describe(flag)}")
    elif word not in defined and al.is_compute_name(word) and re.match(r"\s*\(", code[m.end() :]):
        ambiguous = word in al.CPP_MATH_OVERLAP
        if using_torch:
            detail = f"{word}() under 'using namespace' of torch/ATen " + (
                "may be an ATen op" if ambiguous else "is ATen library compute"
            )
            yield CppHit("library_compute", word, line_of(m.start()), detail, WARNING if ambiguous else ERROR)
        elif not ambiguous and not _declares(code, m.start()):
            # clamp_min(x, 0) on a Tensor finds at::clamp_min by argument-dependent lookup
            detail = f"{word}() is not defined here: on a Tensor argument it is the ATen op (argument-dependent lookup)"
            yield CppHit("library_compute", word, line_of(m.start()), detail)


_CALL_KEYWORDS = frozenset({"return", "co_return", "co_yield", "throw", "else", "do", "case", "sizeof", "new"})


def _declares(code: str, start: int) -> bool:
    """True when the word at ``start`` is being declared (``std::vector<float> gt(n)``, ``float acc(0)``)."""
    before = code[max(0, start - 80) : start].rstrip()
    if before.endswith(">"):
        return True
    prev = re.search(r"([A-Za-z_]\w*)$", before)
    return prev is not None and prev.group(1) not in _CALL_KEYWORDS


def _scan_strings(strings: list[tuple[str, int]], line_of: Lines) -> Iterator[CppHit]:
    for s, offset in strings:
        for pattern, flag in _STRING_FLAGS:
            for m in pattern.finditer(s):
                yield CppHit(flag, m.group(0), line_of(offset), f'string "{m.group(0)}" names {describe(flag)}')


def _first_definitions(code: str, defines: dict[str, list[int]]) -> str | None:
    """``code`` with every repeated #define after the first blanked, or ``None`` when nothing is repeated."""
    later = {i for idx in defines.values() for i in idx[1:]}
    if not later:
        return None
    return "\n".join("" if i in later else line for i, line in enumerate(code.split("\n")))


def scan_source(
    text: str,
    kind: str = "cpp",
    defines: tuple[str, ...] = (),
    preprocess: bool = True,
    known: frozenset[str] = frozenset(),
) -> list[CppHit]:
    """Every construct of interest in one C++/CUDA/MUSA source text, each reported once.

    Args:
        text: The source as the compiler would receive it.
        kind: ``cpp``, ``cuda``, ``musa`` or ``sycl`` (CUDA/MUSA predefine their compiler macros).
        defines: ``-D``/``-U`` options from the build flags, applied to the preprocessor too.
        preprocess: Run ``g++ -E``; when False, or when the preprocessor is missing, only the raw text is scanned.
        known: Functions defined in the build's other sources (a ``.cu`` launcher called from the C++ source).

    Returns:
        Hits in source order; a warning hit ``preprocessor_unavailable`` when preprocessing could not be done.
    """
    code, _ = lex(splice(text), keep_strings=True)
    code, includes, macro_defs = directives(code)
    raw_lines = Lines(code)
    hits: list[CppHit] = []
    for rest, line in includes:
        hits.extend(_check_include(rest, line))
    bare, strings = lex(code, keep_strings=False)
    hits.extend(_scan_names(bare, raw_lines, known))
    hits.extend(_scan_strings(strings, raw_lines))
    if preprocess and code.strip():
        variants = [code] + [v for v in (_first_definitions(code, macro_defs),) if v is not None]
        for variant in variants:
            out, problem = run_preprocessor(variant, kind, list(defines))
            if problem:
                hits.append(CppHit("preprocessor_unavailable", problem, None, problem, WARNING))
            if out is None:
                break
            pp_text, pp_lines = mapped_output(out)
            pp_bare, pp_strings = lex(pp_text, keep_strings=False)
            hits.extend(_scan_names(pp_bare, pp_lines, known))
            hits.extend(_scan_strings(pp_strings, pp_lines))
    if any(len(v) > 1 for v in macro_defs.values()):
        names = sorted(k for k, v in macro_defs.items() if len(v) > 1)
        hits.append(CppHit("macro_redefined", ",".join(names), None, f"macro(s) {', '.join(names)} defined more "
                           "than once; both definitions were checked", WARNING))  # fmt: skip
    unique: dict[tuple[str, str], CppHit] = {}
    for h in hits:
        unique.setdefault((h.flag, h.symbol), h)
    return list(unique.values())


def _split_flags(flags: list[str]) -> list[str]:
    """Tokens of build flags as torch would pass them (stripped, joined, split like a shell)."""
    try:
        return list(normalise_flags(flags))
    except ValueError:  # unbalanced quotes: keep whitespace tokens, the allow-list refuses the quote
        return [t for f in flags for t in f.split()]


def _flag_hits(cflags: list[str], ldflags: list[str]) -> Iterator[CppHit]:
    for problem in refused_flags("extra_cuda_cflags", cflags) + refused_flags("extra_ldflags", ldflags):
        yield CppHit("build_flag_refused", problem.flag, None, problem.message())
    for tok in ldflags:
        if tok.startswith("-l"):
            lib = tok[2:]
            if al.CPP_VENDOR_LIB_RE.match(lib):
                yield CppHit("vendor_library", tok, None, f"linker flag {tok} links a vendor library")
            elif lib not in al.CPP_OK_LIBS:
                yield CppHit("unusual_build_flag", tok, None, f"linker flag {tok} links an unexpected library", WARNING)


def _defines(tokens: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for i, tok in enumerate(tokens):
        if tok in ("-D", "-U") and i + 1 < len(tokens):
            out.append(tok + tokens[i + 1])
        elif tok.startswith(("-D", "-U")) and len(tok) > 2:
            out.append(tok)
    return tuple(out)


def _to_finding(hit: CppHit, where: str, line: int, policy: str) -> Finding | None:
    severity = WARNING if hit.severity == WARNING else al.policy_severity(hit.flag, policy)
    if severity is None:
        return None
    advice = ""
    if hit.flag in ("library_compute", "vendor_library") and severity == ERROR:
        advice = "; write this computation in your own kernel"
    return Finding(hit.flag, severity, f"{where}: {hit.detail}{advice}", line)


def check_build(spec: RecoveredBuild, policy: str = "strict", preprocess: bool = True) -> list[Finding]:
    """Findings for one ``load_inline`` call: its arguments, build flags and every source text.

    Args:
        spec: What :func:`musaenv.verification.static_sources.find_builds` recovered.
        policy: ``strict``, ``permissive`` or ``off`` (library compute is an error, a warning, or ignored).
        preprocess: Expand macros with ``g++ -E`` before scanning.
    """
    out: list[Finding] = []
    call = f"load_inline call at line {spec.line}"
    for name in spec.unresolved:
        msg = f"{call}: argument {name} cannot be resolved statically; pass string literals or module-level constants"
        out.append(Finding("unresolved_source", ERROR, msg, spec.line))
    if spec.build_directory:
        out.append(Finding("file_access", ERROR, f"{call}: build_directory is chosen by the harness", spec.line))
    for problem in check_spec_flags((), (), (), [p.strip() for p in spec.include_paths if p.strip()]):
        out.append(Finding("build_flag_refused", ERROR, f"{call}: {problem.message()}", spec.line))
    cflags, ldflags = _split_flags(spec.cflags), _split_flags(spec.ldflags)
    tokens = cflags + ldflags
    for hit in _flag_hits(cflags, ldflags):
        f = _to_finding(hit, call, spec.line, policy)
        if f is not None:
            out.append(f)
    defines = _defines(tokens)
    known = frozenset(n for src in spec.sources for n in defined_names(lex(splice(src.text), keep_strings=False)[0]))
    for src in spec.sources:
        for hit in scan_source(src.text, src.kind, defines, preprocess, known):
            where = f"{src.kind}_sources" + (f" line {hit.line}" if hit.line is not None else "")
            f = _to_finding(hit, where, src.python_line(hit.line), policy)
            if f is not None:
                out.append(f)
    return out
