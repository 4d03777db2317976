"""Builder subprocess: ``python -m musaenv.toolchains.builder TMPDIR``.

Reads ``TMPDIR/spec.json`` (a :mod:`musaenv.toolchains.job` record), builds it into ``TMPDIR`` (a private build
directory, so no lock is ever shared) and writes ``TMPDIR/result.json``
(a :class:`~musaenv.toolchains.job.BuildReport`).
A job of another version or a malformed one is answered with an ``infra`` report that says so, before any build.
Build modes ``fast`` and ``pch`` drive the compiler directly with torch's
own flags (:mod:`musaenv.toolchains.fastbuild`, no torch import once the flag template is cached); mode
``torch``, and any build those cannot take, goes through torch's own ``load_inline`` with its final import
switched off: nothing of the candidate is ever imported or run here. MUSA builds with device sources go through
torch_musa's ``load_inline`` (``musa_sources``, compiled by mcc), equally without the import.

The whole build runs confined (:mod:`musaenv.isolation.build_jail`: its own pid namespace or a subreaper, tied to
the parent's life, the worker's sandbox with exec allowed, writes only below ``TMPDIR`` and the header store).
The parent enforces the timeout and kills this process's whole session when it is exceeded.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import inspect
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from musaenv.backends import REGISTRY
from musaenv.isolation.build_jail import run_confined
from musaenv.isolation.records import ProtocolError
from musaenv.toolchains.job import JOB_VERSION, BuildReport, CompileJob, WarmupJob, read_job
from musaenv.types import declined as decline

log = logging.getLogger("musaenv.toolchains.builder")


_FAST_TIERS = ("split", "pch")


def _fast(spec: dict[str, Any], tmp: Path, declined: list[dict[str, str]]) -> dict[str, object] | None:
    """The fast driver's build (:mod:`musaenv.toolchains.fastbuild`); ``None``, with why in ``declined``: torch's
    path."""
    mode = spec.get("build_mode", "fast")
    if mode not in ("fast", "pch") or not spec.get("pch_cache"):
        why = f"build mode {mode} (configure_builds)" if spec.get("pch_cache") else "no header store for the driver"
        declined += [decline(t, why) for t in _FAST_TIERS]
        return None
    try:
        from musaenv.toolchains.fastbuild import fast_build

        res = fast_build(spec, spec["name"], tmp, Path(spec["pch_cache"]), mode, declined)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):  # torch's path cannot write either: say so now, not minutes later
            return {"ok": False, "log": f"the fast build could not write its files: {e}", "tier": "fast", "infra": True}
        log.warning("fast build failed, using load_inline:\n%s", traceback.format_exc())
        declined += [decline(t, f"the fast driver failed ({e}): a harness fault, logged") for t in _FAST_TIERS]
        return None
    except Exception as e:  # a harness bug must not cost the candidate its build: torch's path still works
        log.warning("fast build failed, using load_inline:\n%s", traceback.format_exc())
        why = f"the fast driver failed ({type(e).__name__}): a harness fault, logged"
        declined += [decline(t, why) for t in _FAST_TIERS]
        return None
    if res is None:
        return None
    return {"ok": res.ok, "log": res.log, "tier": res.tier, "steps": res.steps, "wanted": res.wanted,
            "retire": res.retire, "declined": [*declined, *res.declined]}  # fmt: skip


@contextlib.contextmanager
def _no_import(module: Any) -> Iterator[None]:
    """Let ``load_inline`` build without importing the result (its static constructors would run here)."""
    original = getattr(module, "_import_module_from_library", None)
    if original is None:
        raise RuntimeError(f"{module.__name__} has no _import_module_from_library; cannot build without importing")
    module._import_module_from_library = lambda *a, **k: None
    try:
        yield
    finally:
        module._import_module_from_library = original


def _torch(spec: dict[str, Any], tmp: Path) -> dict[str, object]:
    import torch.utils.cpp_extension as ce

    accepted = set(inspect.signature(ce.load_inline).parameters)
    kwargs = {
        "cpp_sources": spec["cpp_sources"],
        "cuda_sources": spec["cuda_sources"] or None,
        "functions": spec["functions"],
        "extra_cflags": spec["extra_cflags"] or None,
        "extra_cuda_cflags": spec["extra_cuda_cflags"] or None,
        "extra_ldflags": spec["extra_ldflags"] or None,
        "extra_include_paths": spec["extra_include_paths"] or None,
        "with_cuda": spec["with_cuda"],
    }
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    try:
        with _no_import(ce):
            ce.load_inline(name=spec["name"], build_directory=str(tmp), verbose=False, **kwargs)
    except Exception as e:  # compiler errors arrive as RuntimeError carrying the compiler output
        return {"ok": False, "log": f"{type(e).__name__}: {e}", "tier": "torch"}
    return {"ok": True, "log": "", "tier": "torch"}


_MUSA_MISSING = (
    "the MUSA backend builds with torch_musa's load_inline (torch_musa.utils.musa_extension), and torch_musa is "
    "not importable in the builder: install Moore Threads' torch_musa wheel matching your torch and the MUSA SDK "
    "(mcc under MUSA_HOME, default /usr/local/musa)"
)


def _musa_kwargs(spec: dict[str, Any], accepted: set[str]) -> dict[str, Any] | str:
    """torch_musa's ``load_inline`` keywords for a spec, or why they cannot be formed."""
    kwargs: dict[str, Any] = {
        "cpp_sources": spec["cpp_sources"],
        "functions": spec["functions"],
        "extra_cflags": spec["extra_cflags"] or None,
        "extra_ldflags": spec["extra_ldflags"] or None,
        "extra_include_paths": spec["extra_include_paths"] or None,
    }
    # The device sources and flags: torch_musa spells them musa_*; older releases may take CUDA's spelling.
    aliases = [(a, o) for b in REGISTRY.values() if b.toolchain == "mcc" for a, o in b.loader_aliases.items()]
    for alias, ours in aliases:
        names = (alias, ours)
        if not spec[ours]:
            continue
        target = next((n for n in names if n in accepted), None)
        if target is None:
            return f"this torch_musa's load_inline takes none of {names}; cannot pass the MUSA sources"
        kwargs[target] = spec[ours]
    return {k: v for k, v in kwargs.items() if k in accepted and v is not None}


def _musa(spec: dict[str, Any], tmp: Path) -> dict[str, object]:
    try:
        from torch_musa.utils import musa_extension as me
    except Exception as e:  # missing, or broken against this torch
        return {"ok": False, "log": f"{_MUSA_MISSING} ({type(e).__name__}: {e})", "tier": "musa", "infra": True}
    kwargs = _musa_kwargs(spec, set(inspect.signature(me.load_inline).parameters))
    if isinstance(kwargs, str):
        return {"ok": False, "log": kwargs, "tier": "musa", "infra": True}
    try:
        with _no_import(me):
            me.load_inline(name=spec["name"], build_directory=str(tmp), verbose=False, **kwargs)
    except Exception as e:  # mcc/g++ errors arrive as RuntimeError carrying the compiler output
        return {"ok": False, "log": f"{type(e).__name__}: {e}", "tier": "musa"}
    return {"ok": True, "log": "", "tier": "musa"}


# The backends' own toolchains (their record's ``toolchain``) for device sources, beside the CUDA tiers.
_DEVICE_TOOLCHAINS = {"mcc": _musa, "torch": _torch}


def _toolchain(backend: str | None) -> str:
    b = REGISTRY.get(backend or "")
    return b.toolchain if b is not None else ""


def _cuda_split(
    spec: dict[str, Any], tmp: Path, compile_only: bool, declined: list[dict[str, str]]
) -> dict[str, object] | None:
    """A CUDA spec built through the split (:mod:`musaenv.toolchains.cuda_fast`); ``None``: build it as written (why
    in ``declined``)."""
    mode = spec.get("build_mode", "fast")
    backend, toolchain = spec.get("backend") or "", _toolchain(spec.get("backend"))
    if mode != "fast" or not spec.get("pch_cache") or toolchain:
        why = f"the {backend.upper()} backend builds with {toolchain}" if toolchain else f"build mode {mode}"
        declined.append(decline("cuda_split", why if spec.get("pch_cache") else "no header store for the split"))
        return None
    try:
        from musaenv.toolchains.cuda_fast import cuda_fast_build

        arch = None
        if not compile_only:  # torch's own architecture list (TORCH_CUDA_ARCH_LIST or the visible devices)
            from torch.utils.cpp_extension import _get_cuda_arch_flags

            arch = _get_cuda_arch_flags(list(spec.get("extra_cuda_cflags") or []))
        res = cuda_fast_build(spec, spec["name"], tmp, Path(spec["pch_cache"]), arch_flags=arch, declined=declined)
    except Exception as e:  # a harness bug must not cost the candidate its build: the unsplit build still decides
        log.warning("CUDA split build failed, building as written:\n%s", traceback.format_exc())
        declined.append(decline("cuda_split", f"the split build failed ({type(e).__name__}): a harness fault, logged"))
        return None
    if res is None:
        return None
    return {"ok": res.ok, "log": res.log, "tier": "cuda_split", "steps": res.steps, "seconds": res.seconds,
            "wanted": res.wanted, "retire": res.retire, "declined": declined}  # fmt: skip


def _cuda_check(spec: dict[str, Any], tmp: Path) -> dict[str, object]:
    """The CUDA compile-only check of the source as written (no GPU here), run confined like any build; its output
    is the verdict."""
    from musaenv.toolchains.cuda_compile import cuda_compile_check

    check = cuda_compile_check(
        spec["cpp_sources"], spec["cuda_sources"], spec["functions"],
        extra_cuda_cflags=spec["extra_cuda_cflags"], extra_cflags=spec["extra_cflags"],
        extra_include_paths=spec["extra_include_paths"], timeout_s=float(spec.get("timeout_s") or 300),
        extra_ldflags=spec["extra_ldflags"],
    )  # fmt: skip
    steps = [s if isinstance(s, dict) else str(s) for s in check.steps]
    return {"ok": check.ok, "log": check.log, "tier": "compile_only", "steps": steps,
            "inconclusive": check.inconclusive or ""}  # fmt: skip


def _own_check(job: CompileJob) -> str:
    """The job's backend's own compile-only check (its record's ``compile_check``, ``module:function``), or ``""``."""
    return REGISTRY[job.backend].compile_check if job.backend in REGISTRY else ""


def _own_compile_check(name: str, spec: dict[str, Any], tmp: Path) -> dict[str, object]:
    """A backend's own compile-only check (its record's ``compile_check``, ``module:function``)."""
    module, _, function = name.partition(":")
    check: Callable[[dict[str, Any], Path], dict[str, object]] = getattr(importlib.import_module(module), function)
    return check(spec, tmp)


def _device_build(job: CompileJob) -> Callable[[dict[str, Any], Path], dict[str, object]] | None:
    """The backend's own compiler for a job with device sources (mcc for MUSA), or ``None``."""
    return _DEVICE_TOOLCHAINS.get(_toolchain(job.backend)) if job.cuda_sources or job.with_cuda else None


Build = Callable[[CompileJob, dict[str, Any], Path, list[dict[str, str]]], "dict[str, object] | None"]


@dataclass(frozen=True)
class Toolchain:
    """One build path: which jobs it takes, and its build, which answers the report's fields, or ``None`` when it
    declines the job (why, appended to ``declined``): the next toolchain that takes the job is tried."""

    name: str
    accepts: Callable[[CompileJob], bool]
    build: Build


TOOLCHAINS: tuple[Toolchain, ...] = (
    # compile-only (no device on this machine): the backend's own check, else the CUDA split, else the CUDA check
    Toolchain("own_check", lambda j: j.compile_only and bool(_own_check(j)),
              lambda j, spec, tmp, d: _own_compile_check(_own_check(j), spec, tmp)),
    Toolchain("cuda_split", lambda j: j.compile_only, lambda j, spec, tmp, d: _cuda_split(spec, tmp, True, d)),
    Toolchain("compile_only", lambda j: j.compile_only, lambda j, spec, tmp, d: _cuda_check(spec, tmp)),
    # builds: device code to the backend's own compiler (mcc), never to nvcc; CUDA through the split; C++ through
    # the fast driver; whatever those decline through torch's own load_inline
    Toolchain("device", lambda j: not j.compile_only and _device_build(j) is not None,
              lambda j, spec, tmp, d: _device_build(j)(spec, tmp)),  # type: ignore[misc]
    Toolchain("cuda_split", lambda j: not j.compile_only and bool(j.cuda_sources),
              lambda j, spec, tmp, d: _cuda_split(spec, tmp, False, d)),
    Toolchain("fast", lambda j: not j.compile_only and not j.cuda_sources, lambda j, spec, tmp, d: _fast(spec, tmp, d)),
    Toolchain("torch", lambda j: not j.compile_only, lambda j, spec, tmp, d: _torch(spec, tmp)),
)  # fmt: skip
"""Every build path, in the order tried; a job is built by the first that takes it and does not decline."""


def _build(job: CompileJob | WarmupJob, tmp: Path) -> dict[str, object]:
    if isinstance(job, WarmupJob):  # our own headers and binding objects only (musaenv.toolchains.warmup)
        from musaenv.toolchains.warmup import run_items

        if job.background:
            os.nice(10)  # behind the candidates' builds
        rows = run_items(job.items, Path(job.pch_cache), lambda line: log.info("warmup: %s", line))
        return {"ok": all(r["ok"] for r in rows), "log": "", "tier": "warmup", "rows": rows}
    spec = job.spec()
    declined: list[dict[str, str]] = []
    for toolchain in TOOLCHAINS:
        if toolchain.accepts(job):
            res = toolchain.build(job, spec, tmp, declined)
            if res is not None:
                return res if "declined" in res else {**res, "declined": declined}
    raise RuntimeError(f"no toolchain takes this job (compile_only={job.compile_only}, backend={job.backend!r})")


def _unusable(tmp: Path) -> str | None:
    """Why the confined builder cannot write and read back a file in its own directory, or None.

    Every tier would fail on it (GCC cannot make its temporary files), and a compiler's error then read as the
    candidate's: a sandbox that took the build directory's rights once made honest builds cached compile errors.
    """
    probe = tmp / ".musaenv-probe"
    try:
        probe.write_bytes(b"x")
        probe.read_bytes()
        probe.unlink()
    except OSError as e:
        return f"the builder cannot use its own build directory in its sandbox ({e}): a harness fault, not the sources'"
    return None


def _disk_checked(result: dict[str, object], tmp: Path) -> dict[str, object]:
    """A failed build is the disk's fault only when the builder's own write beside it fails for want of space
    (:func:`musaenv.toolchains.own_checks.out_of_space`): the compiler's text, which the candidate's source can print,
    decides nothing."""
    from musaenv.toolchains.own_checks import out_of_space

    if result.get("ok") or result.get("infra"):
        return result
    why = out_of_space(tmp)
    if why is None:
        return result
    return {**result, "infra": True, "log": f"the disk filled during the build (not the candidate): {why}\n"
                                            f"{result.get('log', '')}"}  # fmt: skip


def _build_and_report(job: CompileJob | WarmupJob | str, tmp: Path, confinement: dict[str, Any]) -> int:
    """Build ``job`` (a string: why the job file was refused) and write the report; returns the exit code."""
    try:
        refused = job if isinstance(job, str) else _unusable(tmp)
        if refused is not None:
            result: dict[str, object] = {"ok": False, "log": refused, "infra": True}
        else:
            assert not isinstance(job, str)
            result = _disk_checked(_build(job, tmp), tmp)
        result.pop("seconds", None)  # the split build's own timing: the parent measures the whole build
        report = BuildReport(version=JOB_VERSION, confinement=confinement, **result)  # type: ignore[arg-type]
    except BaseException:  # the harness must always leave a readable result
        report = BuildReport(version=JOB_VERSION, log=traceback.format_exc(), confinement=confinement)
    (tmp / "result.json").write_text(json.dumps(report.to_dict()))
    return 0 if report.ok else 1


def _read(tmp: Path) -> CompileJob | WarmupJob | str:
    """The job in ``tmp``, or why it cannot be run (reported as ``infra``, never as the sources' fault)."""
    try:
        return read_job(tmp / "spec.json")
    except (OSError, ValueError, ProtocolError) as e:  # ProtocolError is a ValueError; named for the reader
        return f"the builder refused its job ({type(e).__name__}): {e}"


def main(argv: list[str]) -> int:
    """Entry point; returns the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tmp = Path(argv[0]).resolve()
    job = _read(tmp)
    writable = [Path(job.pch_cache)] if not isinstance(job, str) and job.pch_cache else []
    for d in writable:
        d.mkdir(parents=True, exist_ok=True)
    if isinstance(job, CompileJob) and not job.confine:  # configure_builds(confine=False): the sandbox's cost only
        return _build_and_report(job, tmp, {"confined": False})
    return run_confined(  # a refused job is answered from inside the confinement too: nothing runs unconfined
        lambda report: _build_and_report(job, tmp, report),
        tmp,
        parent_pid=0 if isinstance(job, str) else job.parent_pid,
        writable=writable,
        cpu_s=max(1, int(300 if isinstance(job, str) else job.timeout_s or 300)),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
