"""Names a candidate could call in the libraries torch links: read from the installed libraries, not a list.

libtorch exports thousands of plain C entry points besides its own C++ API: on the x86 CPU wheel, MKL in full
(``mkl_*``, BLAS and LAPACK under every Fortran and C spelling: ``sgemm``, ``sgemm_``, ``SGEMM``, ``sgemm_64``,
``cblas_sgemm``, ...), VML (``vsExp``), DFTI, NNPACK, pthreadpool and libuv. Any of them can be reached from a
candidate's C++ with a one-line ``extern "C"`` declaration, so a hand-written list always has gaps (the
``sgemm`` gap was found that way). :func:`exported_c_symbols` reads the dynamic symbol tables of the installed
torch libraries with ``nm -D --defined-only`` (unmangled names only: C++ API calls are judged by namespace), and
the C++ scan refuses any of them that a candidate names.

Kept: ``Sleef_*`` (the SIMD math library that ATen's header-only ``at::vec::Vectorized`` calls for ``exp``,
``log``, ... : using it is writing a kernel), and linker bookkeeping (``_edata``, ``_end``, ``__bss_start``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from musaenv import _env
from musaenv.isolation.integrity import read_sealed, write_sealed

__all__ = ["aten_op_structs", "exported_c_symbols", "symbol_flag"]

log = logging.getLogger(__name__)

_LIBRARIES = ("libtorch_cpu.so", "libtorch.so", "libc10.so", "libtorch_cuda.so", "libc10_cuda.so")
_KEEP_PREFIXES = ("Sleef_", "_edata", "_end", "_init", "_fini", "__bss_start", ".")
_FLAG_BY_PREFIX = (("pthreadpool_", "thread_or_process"), ("uv_", "network"))


def _torch_libs() -> list[Path]:
    spec = importlib.util.find_spec("torch")  # located, not imported
    if spec is None or not spec.origin:
        return []
    lib = Path(spec.origin).parent / "lib"
    return [lib / n for n in _LIBRARIES if (lib / n).exists()]


def _nm(path: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, timeout=120)
    names: set[str] = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not parts[2].startswith("_Z"):
            name = parts[2].split("@", 1)[0]
            if not name.startswith(_KEEP_PREFIXES):
                names.add(name)
    return names


def _libs_ident(libs: list[Path]) -> str:
    return json.dumps([[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in libs])


# Run in a child interpreter: importing torch in the parent (which never needs it otherwise) cost 3.3 s on the
# first binary judgement of every process, and some 300 MB of its memory for the rest of its life.
_SCHEMA_SCRIPT = (
    "import json; from musaenv.verification.libtorch_symbols import _schema_ops_here; "
    "print(json.dumps(_schema_ops_here()))"
)


def _schema_ops_here() -> dict[str, str]:
    import torch  # here: in the child interpreter, or in a process that has torch already

    ops: dict[str, str] = {}
    for s in torch._C._jit_get_all_schemas():
        ns, _, name = s.name.partition("::")
        if ns == "aten":
            ops[f"{name}_{s.overload_name}" if s.overload_name else name] = name
    return ops


@functools.lru_cache(maxsize=1)
def aten_op_structs() -> dict[str, str]:
    """``at::_ops`` struct name -> aten op name, from the installed torch's own schemas (``add_Tensor`` -> ``add``).

    Read once per torch installation in a child interpreter and kept sealed on disk (a list with plumbing names
    added would let library compute pass), so the parent process never imports torch for it.
    """
    libs = _torch_libs()
    cache = None
    if libs:
        ident = _libs_ident(libs)
        cache = _env.cache_dir() / "symbols" / f"ops-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.json"
        body = read_sealed(cache, "aten_op_structs")
        if body is not None and body.get("ident") == ident and isinstance(body.get("ops"), dict):
            return dict(body["ops"])
    if "torch" in sys.modules:  # imported already (a worker, a test): read here, in 60 ms
        return _schema_ops_here()
    try:
        root = str(Path(__file__).resolve().parents[2])  # this musaenv, importable however this process found it
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
        out = subprocess.run([sys.executable, "-c", _SCHEMA_SCRIPT], capture_output=True, text=True, timeout=300,
                             env=env)  # fmt: skip
        ops = json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        ops = None
    if not isinstance(ops, dict) or not ops:
        log.warning("could not read torch's schemas in a child interpreter; reading them in this process")
        return _schema_ops_here()
    if cache is not None:
        with contextlib.suppress(OSError):
            write_sealed(cache, "aten_op_structs", {"ident": ident, "ops": ops})
    return ops


@functools.lru_cache(maxsize=1)
def exported_c_symbols() -> frozenset[str]:
    """Unmangled functions and objects the installed torch libraries export (cached per library build on disk).

    Empty when torch or ``nm`` is missing (then only the hand-written bans apply; logged once).
    """
    libs = _torch_libs()
    if not libs:
        return frozenset()
    ident = _libs_ident(libs)
    cache = _env.cache_dir() / "symbols" / f"{hashlib.sha256(ident.encode()).hexdigest()[:24]}.json"
    body = read_sealed(cache, "libtorch_symbols")  # sealed: a shortened list would lift bans
    if body is not None and body.get("ident") == ident:
        return frozenset(body["names"])
    try:
        names = set().union(*(_nm(p) for p in libs))
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("cannot read torch's exported symbols (%s); only the hand-written C++ bans apply", e)
        return frozenset()
    with contextlib.suppress(OSError):
        write_sealed(cache, "libtorch_symbols", {"ident": ident, "names": sorted(names)})
    return frozenset(names)


def symbol_flag(name: str) -> str:
    """The static-check flag for naming exported symbol ``name``."""
    for prefix, flag in _FLAG_BY_PREFIX:
        if name.startswith(prefix):
            return flag
    return "vendor_library"
