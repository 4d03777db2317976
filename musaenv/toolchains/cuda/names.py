"""What torch's headers could change about a CUDA candidate's kernels: the facts a device-unit error is judged by.

The split (:mod:`musaenv.toolchains.cuda.split`) compiles the kernels without torch's headers; ``load_inline`` compiles
them below ``torch/types.h``, ``cuda.h``, ``cuda_runtime.h`` and the torch headers the candidate includes itself.
Those headers only add to what the kernels see: declarations, and macros (which can change any line). So an error
nvcc reports on the device unit is also an error of the unsplit unit unless the headers could explain it, and they
can only explain it through a name they spell. :class:`TorchNames` holds what is needed to rule that out:

* ``tokens``: every identifier the unsplit unit's headers hold after preprocessing, for the host and the device
  pass, macro names and bodies included. A declaration of ``X`` (a variable, a function, an overload, a member, a
  ``using``) holds the token ``X`` there, so "identifier ``X`` is undefined" with ``X`` not among them cannot be
  cured by those headers.
* ``macros``: macros the unsplit unit's headers define differently from the device unit wherever a candidate line
  can be (defined in one and not the other, or with another body: after load_inline's header lines and after each
  of the candidate's torch includes, in its order), for either pass. A kernel that spells one of them may read
  differently there, so none of its errors is judged without the headers. A state inside a header that no
  candidate line can see (glibc's ``assert.h`` undefines ``assert`` when included again) does not count.

Both come from ``nvcc -E`` with the device step's own flags (so the same ``-std``, defines and include paths, i.e.
the same language rules), once per set of flags and torch includes, cached in the header store
(``cuda_names/<key>.json``). Any failure to compute them returns ``None``: the unsplit check then decides.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["TorchNames", "torch_includes", "torch_names"]

log = logging.getLogger(__name__)

_VERSION = 4  # of the record's format and of how it is computed: a change makes new keys
_IDENT = re.compile(r"[A-Za-z_]\w*")
# A #define/#undef, or a line marker (``# 5 "file.cu" 2``: back in ``file.cu`` at its line 5).
_DIRECTIVE = re.compile(
    r'^(?:\s*#\s*(?P<kind>define|undef)\s+(?P<name>\w+)(?P<body>.*)|# (?P<marker>\d+) "(?P<file>[^"]*)".*)$', re.M
)
_TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10|pybind11|Python\.h|caffe2)[^>"]*[>"]', re.M)
_MACRO_CHANGE = re.compile(r"^\s*#\s*(define|undef)\b", re.M)


@dataclass(frozen=True)
class TorchNames:
    """What the unsplit unit's headers spell (see the module's text).

    Attributes:
        tokens: Identifiers of the preprocessed headers, both passes.
        macros: Macros whose final definition differs between the unsplit unit's headers and the device unit's.
    """

    tokens: frozenset[str]
    macros: frozenset[str]


def torch_includes(cuda_source: str) -> list[str] | None:
    """The torch include lines of a CUDA source in its order (the unsplit unit has them, the device unit not), or
    ``None`` when a ``#define``/``#undef`` comes before one of them (it could change what that header declares)."""
    includes = [m.group(0).strip() for m in _TORCH_INCLUDE.finditer(cuda_source)]
    if not includes:
        return []
    last = max(m.start() for m in _TORCH_INCLUDE.finditer(cuda_source))
    if _MACRO_CHANGE.search(cuda_source[:last]):
        return None
    return list(dict.fromkeys(includes))  # the candidate's order: its lines between them see those states


def _macros(text: str, main: str = "", after: int = 0) -> tuple[dict[str, str], dict[str, set[str | None]]]:
    """Of an ``-E -dD`` output: the final ``#define`` state (name -> body, parameters included), and the states
    each name has at the lines of the ``main`` file below its line ``after`` (``None``: undefined), since candidate
    code between two torch includes sees those. A line of ``main`` sees the state of the last line marker back in
    ``main`` at or above it (an include that adds nothing leaves none). A state only inside a header (glibc's
    ``assert.h``, included again, undefines ``assert`` and defines it anew) is seen by no candidate line."""
    state: dict[str, str] = {}
    looks: list[dict[str, str]] = []
    for m in _DIRECTIVE.finditer(text):
        if m["marker"] is None:
            if m["kind"] == "define":
                state[m["name"]] = m["body"].strip()
            else:
                state.pop(m["name"], None)
        elif m["file"] == main:
            looks = [dict(state)] if int(m["marker"]) <= after + 1 else [*looks, dict(state)]
    looks.append(state)
    names = set().union(*looks)
    return state, {n: {look.get(n) for look in looks} for n in names}


def _preprocess(
    nvcc: str, flags: Sequence[str], lines: Sequence[str], tmp: Path, deadline: float
) -> tuple[list[str], str]:
    """``nvcc -E -dD`` of ``lines``, device pass then host pass, and the name its line markers give the file of
    ``lines``; raises on any failure."""
    src = tmp / f"musaenv_names_{os.getpid()}_{len(lines)}.cu"
    src.write_text("\n".join(lines) + "\n")
    out = []
    try:
        for extra in ((), ("-U__CUDA_ARCH__",)):
            left = deadline - time.monotonic()
            if left <= 1:
                raise TimeoutError("no time left to preprocess the headers")
            cmd = [nvcc, *flags, *extra, "-E", "-Xcompiler", "-dD", str(src)]
            p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=left, errors="replace")
            if p.returncode != 0:
                raise RuntimeError(f"nvcc -E exited {p.returncode}: {p.stderr[-300:]}")
            out.append(p.stdout)
    finally:
        src.unlink(missing_ok=True)
    return out, str(src)


def _key(nvcc: str, flags: Sequence[str], includes: Sequence[str], device_prelude: Sequence[str]) -> str:
    st = Path(nvcc).resolve().stat()
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "?"
    ident = [_VERSION, torch_version, str(Path(nvcc).resolve()), st.st_size, st.st_mtime_ns, list(flags),
             list(includes), list(device_prelude)]  # fmt: skip
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:32]


def torch_names(
    cache: Path,
    nvcc: str,
    flags: Sequence[str],
    unsplit_prelude: Sequence[str],
    includes: Sequence[str],
    device_prelude: Sequence[str],
    tmp: Path,
    deadline: float,
) -> TorchNames | None:
    """The :class:`TorchNames` of an unsplit unit, from the cache or computed now; ``None`` when they cannot be had.

    Args:
        cache: The header store (``cuda_names/`` below it).
        nvcc: The compiler the device step ran.
        flags: The device step's flags without its input, output and ``-c`` (the same language rules).
        unsplit_prelude: The lines ``load_inline`` puts above the candidate's CUDA source.
        includes: The candidate's own torch include lines (:func:`torch_includes`).
        device_prelude: The lines the device unit starts with.
        tmp: A private directory to preprocess in.
        deadline: ``time.monotonic()`` past which nothing is computed.
    """
    try:
        path = cache / "cuda_names" / f"{_key(nvcc, flags, includes, device_prelude)}.json"
        if path.exists():
            record = json.loads(path.read_text())
            return TorchNames(frozenset(record["tokens"]), frozenset(record["macros"]))
        torch_out, torch_file = _preprocess(nvcc, flags, [*unsplit_prelude, *includes], tmp, deadline)
        device_out, _ = _preprocess(nvcc, flags, list(device_prelude), tmp, deadline)
    except (OSError, ValueError, KeyError, RuntimeError, subprocess.SubprocessError) as e:
        log.info("the names torch's headers declare could not be had (%s): the unsplit check decides", e)
        return None
    tokens: set[str] = set()
    changed: set[str] = set()
    for t, d in zip(torch_out, device_out, strict=True):
        tokens.update(_IDENT.findall(t))
        # Candidate lines see the unsplit unit's states below its prelude, the device unit's final one.
        (tm, t_seen), (dm, _) = _macros(t, torch_file, len(unsplit_prelude)), _macros(d)
        changed.update(n for n in tm.keys() | dm.keys() if tm.get(n) != dm.get(n))
        changed.update(n for n, bodies in t_seen.items() if bodies - {dm.get(n)})
    names = TorchNames(frozenset(tokens | changed), frozenset(changed))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        part.write_text(json.dumps({"tokens": sorted(names.tokens), "macros": sorted(names.macros)}))
        part.replace(path)
    except OSError as e:  # an unwritable store: computed again next time, the verdict is the same
        log.info("could not keep the names torch's headers declare: %s", e)
    return names


# Lookups nvcc names the missing name of: it is the last identifier quoted.
_NAMED_LOOKUP = re.compile(
    r'^(?:identifier "(?P<id>\w+)" is undefined'
    r'|(?P<kind>namespace|class|struct|union) "(?P<owner>[^"]*)" has no member'
    r' (?:class |function |variable )?"(?P<member>\w+)"'
    r'|no instance of (?:overloaded function|function template) "(?:[\w:]*::)?(?P<fn>\w+)" matches)'
)
# Operators C++ allows only as members: no header can add one to a built-in type or a class already complete.
_MEMBER_OPERATOR = re.compile(r'^no operator "(\[\]|\(\)|=|->)" matches these operands$')
_OPERANDS = re.compile(r"^\s*operand types are: (.*)$", re.M)
_BUILTIN_TYPE = re.compile(
    r"^(const|volatile|unsigned|signed|int|float|double|char|long|short|bool|void|size_t|__restrict__"
    r"|(u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]|dim3|__half2?|half2?|__nv_bfloat162?)$"
)


def looked_up(message: str, context: str) -> str | None:
    """For an nvcc lookup error (``message``, ``context``: the lines nvcc prints under it), the name a header would
    have to declare to cure it; ``""`` when no header could (a member-only operator on built-in or CUDA vector
    types, a member a CUDA vector type lacks: ``blockIdx.w``, whose ``uint3`` both units take complete from CUDA's
    own headers); ``None`` when it cannot be said."""
    m = _NAMED_LOOKUP.match(message)
    if m and m["member"] and m["kind"] != "namespace" and _BUILTIN_TYPE.match(m["owner"]):
        return ""
    if m:
        return m["id"] or m["member"] or m["fn"]
    operands = _OPERANDS.search(context)
    if _MEMBER_OPERATOR.match(message) and operands:
        words = _IDENT.findall(operands.group(1))
        if words and all(_BUILTIN_TYPE.match(w) for w in words):
            return ""
    return None
