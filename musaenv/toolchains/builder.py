"""Builder subprocess: ``python -m musaenv.toolchains.builder TMPDIR``.

Reads ``TMPDIR/spec.json`` (a :mod:`musaenv.toolchains.job` record), builds it into ``TMPDIR`` (a private build
directory, so no lock is ever shared) and writes ``TMPDIR/result.json``
(a :class:`~musaenv.toolchains.job.BuildReport`).
A job of another version or a malformed one is answered with an ``infra`` report that says so, before any build.
The build paths are :data:`TOOLCHAINS`, one ordered list of
:class:`~musaenv.toolchains.toolchain.Toolchain` records. Build modes ``fast`` and ``pch`` drive the compiler
directly with torch's own flags (:mod:`musaenv.toolchains.cpp.fastbuild`, no torch import once the flag template is
cached); mode ``torch``, and any build those cannot take, goes through torch's own ``load_inline`` with its final
import switched off (:mod:`musaenv.toolchains.torch_inline`): nothing of the candidate is ever imported or run
here. MUSA builds with device sources go through torch_musa's ``load_inline`` (``musa_sources``, compiled by
mcc), equally without the import.

The whole build runs confined (:mod:`musaenv.isolation.build_jail`: its own pid namespace or a subreaper, tied to
the parent's life, the worker's sandbox with exec allowed, writes only below ``TMPDIR`` and the header store).
The parent enforces the timeout and kills this process's whole session when it is exceeded.
"""

from __future__ import annotations

import errno
import importlib
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from musaenv.backends import REGISTRY
from musaenv.isolation.build_jail import run_confined
from musaenv.isolation.records import ProtocolError
from musaenv.toolchains.cpp.clang import TOOLCHAIN as CLANG
from musaenv.toolchains.job import JOB_VERSION, BuildReport, CompileJob, WarmupJob, read_job
from musaenv.toolchains.toolchain import Toolchain
from musaenv.toolchains.torch_inline import musa_build, torch_build
from musaenv.types import declined as decline

log = logging.getLogger("musaenv.toolchains.builder")


_FAST_TIERS = ("split", "pch")


def _fast(spec: dict[str, Any], tmp: Path, declined: list[dict[str, str]]) -> dict[str, object] | None:
    """The fast driver's build (:mod:`musaenv.toolchains.cpp.fastbuild`); ``None``, with why in ``declined``: torch's
    path."""
    mode = spec.get("build_mode", "fast")
    if mode not in ("fast", "pch") or not spec.get("pch_cache"):
        why = f"build mode {mode} (configure_builds)" if spec.get("pch_cache") else "no header store for the driver"
        declined += [decline(t, why) for t in _FAST_TIERS]
        return None
    try:
        from musaenv.toolchains.cpp.fastbuild import fast_build

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


# The backends' own toolchains (their record's ``toolchain``) for device sources, beside the CUDA tiers.
_DEVICE_TOOLCHAINS: dict[str, Callable[[CompileJob, Path], dict[str, object]]] = {
    "mcc": musa_build,
    "torch": torch_build,
}


def _toolchain(backend: str | None) -> str:
    b = REGISTRY.get(backend or "")
    return b.toolchain if b is not None else ""


def _cuda_split(
    spec: dict[str, Any], tmp: Path, compile_only: bool, declined: list[dict[str, str]]
) -> dict[str, object] | None:
    """A CUDA spec built through the split (:mod:`musaenv.toolchains.cuda.fast`); ``None``: build it as written (why
    in ``declined``)."""
    mode = spec.get("build_mode", "fast")
    backend, toolchain = spec.get("backend") or "", _toolchain(spec.get("backend"))
    if mode != "fast" or not spec.get("pch_cache") or toolchain:
        why = f"the {backend.upper()} backend builds with {toolchain}" if toolchain else f"build mode {mode}"
        declined.append(decline("cuda_split", why if spec.get("pch_cache") else "no header store for the split"))
        return None
    try:
        from musaenv.toolchains.cuda.fast import cuda_fast_build

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


def _cuda_check(job: CompileJob, tmp: Path) -> dict[str, object]:
    """The CUDA compile-only check of the source as written (no GPU here), run confined like any build; its output
    is the verdict."""
    from musaenv.toolchains.cuda.compile import cuda_compile_check

    check = cuda_compile_check(
        job.cpp_sources, job.cuda_sources, job.functions,
        extra_cuda_cflags=job.extra_cuda_cflags, extra_cflags=job.extra_cflags,
        extra_include_paths=job.extra_include_paths, timeout_s=float(job.timeout_s or 300),
        extra_ldflags=job.extra_ldflags,
    )  # fmt: skip
    steps = [s if isinstance(s, dict) else str(s) for s in check.steps]
    return {"ok": check.ok, "log": check.log, "tier": "compile_only", "steps": steps,
            "inconclusive": check.inconclusive or ""}  # fmt: skip


def _own_check(job: CompileJob) -> str:
    """The job's backend's own compile-only check (its record's ``compile_check``, ``module:function``), or ``""``."""
    return REGISTRY[job.backend].compile_check if job.backend in REGISTRY else ""


def _own_compile_check(job: CompileJob, tmp: Path) -> dict[str, object]:
    """A backend's own compile-only check (its record's ``compile_check``, ``module:function``)."""
    module, _, function = _own_check(job).partition(":")
    check: Callable[[dict[str, Any], Path], dict[str, object]] = getattr(importlib.import_module(module), function)
    return check(job.spec(), tmp)


def _device_build(job: CompileJob) -> Callable[[CompileJob, Path], dict[str, object]] | None:
    """The backend's own compiler for a job with device sources (mcc for MUSA), or ``None``."""
    return _DEVICE_TOOLCHAINS.get(_toolchain(job.backend)) if job.cuda_sources or job.with_cuda else None


TOOLCHAINS: tuple[Toolchain, ...] = (
    # a backend's own compile-only check (no device on this machine), and its own compiler for device code (mcc),
    # never nvcc
    Toolchain("own_check", lambda j: bool(_own_check(j)), compile_only=lambda j, tmp, d: _own_compile_check(j, tmp)),
    Toolchain("device", lambda j: _device_build(j) is not None,
              build=lambda j, tmp, d: _device_build(j)(j, tmp)),  # type: ignore[misc]
    # CUDA through the split, C++ through the fast driver
    Toolchain("cuda_split", lambda j: j.compile_only or bool(j.cuda_sources),
              build=lambda j, tmp, d: _cuda_split(j.spec(), tmp, False, d),
              compile_only=lambda j, tmp, d: _cuda_split(j.spec(), tmp, True, d)),
    CLANG,  # C++ by clang++ when the configuration asks for it (build mode clang)
    Toolchain("fast", lambda j: not j.cuda_sources, build=lambda j, tmp, d: _fast(j.spec(), tmp, d)),
    # whatever those decline: torch's own load_inline; compile-only, the CUDA check of the source as written
    Toolchain("torch", lambda j: True, build=lambda j, tmp, d: torch_build(j, tmp),
              compile_only=lambda j, tmp, d: _cuda_check(j, tmp)),
)  # fmt: skip
"""Every build path, in the order tried; a job is run by the first that takes it (:meth:`Toolchain.runner`) and
does not decline."""


def _build(job: CompileJob | WarmupJob, tmp: Path) -> dict[str, object]:
    if isinstance(job, WarmupJob):  # our own headers and binding objects only (musaenv.toolchains.warmup)
        from musaenv.toolchains.warmup import run_items

        if job.background:
            os.nice(10)  # behind the candidates' builds
        rows = run_items(job.items, Path(job.pch_cache), lambda line: log.info("warmup: %s", line))
        return {"ok": all(r["ok"] for r in rows), "log": "", "tier": "warmup", "rows": rows}
    declined: list[dict[str, str]] = []
    for toolchain in TOOLCHAINS:
        run = toolchain.runner(job)
        if run is not None:
            res = run(job, tmp, declined)
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
