"""Which of a candidate's compiler flags a precompiled header or a cached binding object depends on.

A candidate's flags used to key everything: a flag set never seen before built a precompiled ``torch/types.h``
(~22 s CPU), a precompiled ``torch/extension.h`` (~48 s) and the binding objects (~14 s) before its own compile,
about 3x slower than plain ``load_inline``. Most flags change none of those.

**Precompiled headers** (GCC 12's rules, "Using Precompiled Headers" in the GCC manual, checked here with
``-Winvalid-pch`` against the real compiler, ``tests/unit/toolchains/cpp/test_flagkeys.py``):

* *Macros* (``-D``/``-U``) are checked by GCC itself: a header that tests or expands a macro defined differently
  at use is refused with ``not used because `X' is defined``, and the compile parses the real header instead
  (correct, only slower). So macros are left out of the key; a macro GCC has refused once joins the key from then
  on (:meth:`musaenv.toolchains.cpp.pch.PchStore.sensitive_macros`).
* *Optimisation levels* only matter through the macros they define: ``-O1``, ``-O2`` and ``-O3`` all define
  ``__OPTIMIZE__`` and nothing else, and a header precompiled at ``-O3`` gives byte-identical code at ``-O2``
  (tested); ``-O0`` (``__NO_INLINE__``), ``-Os``/``-Oz`` (``__OPTIMIZE_SIZE__``), ``-Og`` and ``-Ofast``
  (fast-math changes the target option ``-mieee-fp``) are classes of their own.
* *Warnings* are left out: torch's headers are ``-isystem``, so their warnings are never shown either way.
* *Optimisation passes* (``-funroll-loops``, ``-ftree-vectorize``, ``-fno-strict-aliasing``, ``-ffp-contract=``,
  ...: :data:`_CODEGEN_ONLY`) are left out: GCC runs them when it generates code, after the header is loaded, and
  the code is byte-identical with and without a header built without them (tested).
* Everything else stays in the key: target options (``-m...``, ``-march=native`` differs in ``-mabm``...),
  ``-f...`` options (``-fopenmp`` where the header's text depends on it, below: it defines ``_OPENMP``, which
  ``torch/extension.h`` tests to include ``omp.h``; ``-ffast-math`` changes ``-mieee-fp``, ``-fno-math-errno``
  defines ``__NO_MATH_ERRNO__`` and changes GCC's built-in math declarations, ``-fopenmp-simd`` changes how
  ``#pragma omp simd`` parses), ``-std=``, ``-g``.
* *OpenMP and threads* (``-fopenmp``, ``-pthread``) are left out of a kind's key when its header's text does not
  depend on them (checked once per installation and header by :class:`.pch.PchStore`: the preprocessed
  header is the same text with and without them, with no OpenMP pragma in it, and they define only ``_OPENMP`` and
  ``_REENTRANT``; true of ``torch/types.h`` in torch 2.13, not of ``torch/extension.h``). Such a header is built with
  ``-fopenmp -U_OPENMP -U_REENTRANT`` (:data:`OMP_SHARED_FLAGS`): GCC declares its OpenMP built-ins, which an OpenMP
  unit needs from its header (without them GCC 12 crashes in ``ompexp``), and the two macros stay out of the header so
  that GCC accepts it for units with and without them. A unit with ``-fopenmp`` or ``-pthread`` undefines them on its
  command line and defines them again right after the header, as the compiler would have (:func:`omp_macros`): the
  same code as with a header of its own (tested).
* *Instruction-set extensions* (``-mavx2``, ``-mfma``, ``-mavx512f``, ``-msse4.2``, ...: :func:`isa_flags`) are left
  out of a kind's key when the header's text does not depend on them (checked once per installation, header and
  set of extensions by :class:`musaenv.toolchains.cpp.pch.PchStore`: the preprocessed header is the same text with and
  without them, apart from the ``#pragma GCC push_options``/``target``/``pop_options`` lines GCC's intrinsic headers
  wrap their code in when an extension is off). GCC refuses a header for any difference in them, so a unit with
  them compiles *without* them on its command line, and includes right after the header ``#pragma GCC
  target("avx2,fma")`` and the macros they define (``__AVX2__``, ``__FMA__``, ``__BIGGEST_ALIGNMENT__``...: GCC's
  C++ front end does not define them for the pragma). Every function of the candidate's then has the extensions,
  as on the command line (the same code, tested); the header's own inline functions keep the header's target, and
  inline into the candidate's (their extensions are a subset). Only positive extensions: ``-march=``, ``-mtune=``,
  ``-mno-...`` and ``-mprefer-vector-width=`` stay in the key (GCC does not inline across a different
  architecture or tuning). And only for a unit whose optimisation options are its header's (``-O3``, no pass of
  its own: after the pragma GCC takes them from the header, :func:`isa_flags`); that is why the ``-O1``..``-O3``
  class's header is built at ``-O3``, the level most candidates ask for.
* *Equivalent lists* key alike: of options of one family (``-O``, ``-std=``, ``-march=``, ``-fX``/``-fno-X``,
  ...) the last wins, as in GCC, duplicates go, and the order of the rest does not matter.

**Binding objects** (the ``PYBIND11_MODULE`` and ``m.def`` units, our own code) depend only on the flags that can
change the ABI of the types they pass (``-std=``, ``-fno-exceptions``, ``-fno-rtti``, ``-fvisibility``, macros of
the implementation or of torch/pybind11 such as ``_GLIBCXX_USE_CXX11_ABI``); they are always compiled at ``-O2``,
so an unoptimised candidate (KernelBench's ``[""]``) links the same objects as an ``-O3`` one instead of paying
~15 s for its own (its calls then cross an optimised binding, as fast as or faster than ``load_inline``'s).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = [
    "OMP_FLAG_TOKENS",
    "OMP_MACROS",
    "OMP_SHARED_FLAGS",
    "bind_key_flags",
    "isa_families",
    "isa_flags",
    "isa_pragma",
    "macro_name",
    "omp_macros",
    "omp_shareable",
    "opt_class",
    "pch_key_flags",
    "refusal",
    "refused_macros",
    "strip_refusals",
]

# Representative of each optimisation class (the flag a shared header is built with); None: no -O at all.
_OPT_CLASS = {"-O0": None, "-O": "-O3", "-O1": "-O3", "-O2": "-O3", "-O3": "-O3", "-Os": "-Os", "-Oz": "-Oz",
              "-Og": "-Og", "-Ofast": "-Ofast"}  # fmt: skip
_WARNING = re.compile(r"^(-W(?!l,|a,|p,).*|-w|-pedantic|-pedantic-errors)$")
_MACRO = re.compile(r"^-[DU]([A-Za-z_]\w*)")
# Optimisation passes only: GCC applies them when it generates code, at use (same code with and without a header
# built without them, tested); none defines a macro or changes how a header parses.
_CODEGEN_ONLY = re.compile(
    r"^-f(no-)?(unroll-loops|unroll-all-loops|tree-vectorize|tree-loop-vectorize|tree-slp-vectorize"
    r"|omit-frame-pointer|prefetch-loop-arrays|peel-loops|ipa-pta|strict-aliasing|inline-functions)$"
    r"|^-f(vect-cost-model|fp-contract)="
)
# Macros that may change the layout or ABI of the standard library, torch or pybind11 types.
_ABI_MACRO = re.compile(r"^(_|C10_|TORCH_|AT_|CAFFE2_|PYBIND11_|Py)")
_ABI_FLAG = re.compile(r"^(-std=.*|-f(no-)?(exceptions|rtti|PIC|pic)|-fvisibility=.*|-fvisibility-inlines-hidden)$")
_GCC_REFUSAL = re.compile(
    r"^.*\.gch: (not used because|created and used with|created with|settings for|.*\[-Winvalid-pch\]).*$", re.MULTILINE
)
_REFUSED_MACRO = re.compile(r"not used because [`'‘]([A-Za-z_]\w*)['’]")


def _family(tok: str) -> str:
    """Options of one family override each other (the last one given wins, as in GCC)."""
    if tok.startswith("-O"):
        return "-O"
    for prefix in ("-std=", "-march=", "-mtune=", "-fvisibility=", "-ffp-contract=", "-fvect-cost-model="):
        if tok.startswith(prefix):
            return prefix
    m = re.match(r"^-([fm])(no-)?([\w+.\-]+)$", tok)
    if m:
        return f"-{m.group(1)}{m.group(3)}"
    m = _MACRO.match(tok)
    if m:
        return f"macro:{m.group(1)}"
    if tok.startswith("-g"):
        return "-g"
    return tok


def _last_of_each(tokens: Iterable[str]) -> dict[str, str]:
    chosen: dict[str, str] = {}
    for tok in tokens:
        fam = _family(tok)
        chosen.pop(fam, None)  # the last one given wins
        chosen[fam] = tok
    return chosen


def opt_class(tokens: Sequence[str]) -> str | None:
    """The representative ``-O`` flag of a flag list's optimisation class (``None``: unoptimised)."""
    level = _last_of_each(tokens).get("-O", "-O0")
    return _OPT_CLASS.get(level, level)


def macro_name(tok: str) -> str | None:
    """The macro a ``-D``/``-U`` flag defines or undefines, else ``None``."""
    m = _MACRO.match(tok)
    return m.group(1) if m else None


# What a header shared by units with and without -fopenmp/-pthread is built with, and the macros those define.
OMP_SHARED_FLAGS = ("-fopenmp", "-U_OPENMP", "-U_REENTRANT")
OMP_MACROS = ("_OPENMP", "_REENTRANT")
_OMP_FAMILIES = ("-fopenmp", "-pthread")
OMP_FLAG_TOKENS = ("-fopenmp", "-fno-openmp", "-pthread")  # what a header's text is compared without


def omp_macros(tokens: Sequence[str]) -> tuple[str, ...]:
    """The predefined macros a flag list's ``-fopenmp`` (both) or ``-pthread`` (``_REENTRANT``) defines."""
    chosen = _last_of_each(tokens)
    if chosen.get("-fopenmp") == "-fopenmp":
        return OMP_MACROS
    return ("_REENTRANT",) if "-pthread" in chosen else ()


def omp_shareable(tokens: Sequence[str]) -> bool:
    """Whether a flag list may use an OpenMP-shared header: it neither defines nor undefines those macros."""
    return not any(macro_name(t) in OMP_MACROS for t in tokens)


# x86 instruction-set extensions a unit can take by ``#pragma GCC target`` after a header made without them.
_ISA = re.compile(r"^-m(avx\w*|fma4?|f16c|sse[\d.]*|ssse3|bmi2?|popcnt|lzcnt|amx-(tile|int8|bf16|fp16))$")


def isa_flags(tokens: Sequence[str]) -> tuple[str, ...]:
    """The instruction-set extensions a flag list can take by pragma (``-mavx2``, ``-mfma``...: the last of each
    family, sorted); an extension turned off again later in the list (``-mavx2 -mno-avx2``) is not one of them.

    None unless the list's optimisation options are exactly those its header is built with (its class's level,
    no optimisation pass of its own): after ``#pragma GCC target`` GCC compiles the unit's functions with the
    optimisation options saved in the precompiled header, not the command line's (measured: ``-funroll-loops``
    or ``-O2`` on the unit's command line are then lost), so a unit takes its extensions by pragma only where the
    two agree.
    """
    chosen = _last_of_each(tokens)
    level = chosen.get("-O", "-O0")
    if (_OPT_CLASS.get(level, level) or "-O0") != level or any(_CODEGEN_ONLY.match(tok) for tok in chosen.values()):
        return ()
    return tuple(sorted(tok for tok in chosen.values() if _ISA.match(tok)))


def isa_families(tokens: Sequence[str]) -> set[str]:
    """Every token of the families :func:`isa_flags` takes (``-mavx2`` and ``-mno-avx2`` alike): what a unit that
    takes them by pragma leaves off its command line."""
    families = {_family(tok) for tok in isa_flags(tokens)}
    return {tok for tok in tokens if _family(tok) in families}


def isa_pragma(isa: Sequence[str]) -> str:
    """``#pragma GCC target`` for extensions as :func:`isa_flags` gives them."""
    return '#pragma GCC target("' + ",".join(tok[2:] for tok in isa) + '")'


def pch_key_flags(
    tokens: Sequence[str], sensitive_macros: Iterable[str] = (), omp_shared: bool = False, isa_shared: bool = False
) -> tuple[str, ...]:
    """The candidate flags a precompiled header is built with (and keyed on); see the module docstring.

    ``omp_shared``: the kind's header text does not depend on ``-fopenmp``/``-pthread``; ``isa_shared``: nor on
    the list's instruction-set extensions (both checked by the store).
    """
    keep_macros = set(sensitive_macros)
    shared = omp_shared and omp_shareable(tokens)
    isa = set(isa_flags(tokens)) if isa_shared else set()
    out: list[str] = list(OMP_SHARED_FLAGS) if shared else []
    for fam, tok in _last_of_each(tokens).items():
        if fam == "-O" or _WARNING.match(tok) or _CODEGEN_ONLY.match(tok) or (shared and fam in _OMP_FAMILIES):
            continue
        if tok in isa:
            continue
        name = macro_name(tok)
        if name is not None and name not in keep_macros:
            continue
        out.append(tok)
    level = opt_class(tokens)
    return tuple(sorted(out + ([level] if level else [])))


def bind_key_flags(tokens: Sequence[str]) -> tuple[str, ...]:
    """The candidate flags the binding objects are compiled with (and keyed on); see the module docstring."""
    out = ["-O2"]
    for tok in _last_of_each(tokens).values():
        name = macro_name(tok)
        if (name is not None and _ABI_MACRO.match(name)) or _ABI_FLAG.match(tok):
            out.append(tok)
    return tuple(sorted(out))


def refusal(compiler_output: str) -> list[str]:
    """GCC's ``-Winvalid-pch`` lines: why a precompiled header was not used (empty when it was)."""
    return [m.group(0).strip() for m in _GCC_REFUSAL.finditer(compiler_output)]


def refused_macros(lines: Iterable[str]) -> set[str]:
    """Macros named by GCC's refusals (``not used because `X' is defined``)."""
    return {m.group(1) for line in lines for m in _REFUSED_MACRO.finditer(line)}


def strip_refusals(compiler_output: str) -> str:
    """Compiler output without the ``-Winvalid-pch`` lines (they are ours, not the candidate's)."""
    return "\n".join(line for line in compiler_output.splitlines() if not _GCC_REFUSAL.match(line)) + (
        "\n" if compiler_output.endswith("\n") else ""
    )
