"""Precompiled headers and binding objects built ahead of the builds that use them.

Two ways in, both through the confined builder (:mod:`musaenv.toolchains.builder`, given a
:class:`~musaenv.toolchains.job.WarmupJob`), both compiling only our own sources (``#include <torch/types.h>`` and
friends), never a candidate's:

* ``musaenv warmup`` (:func:`warmup`): the flag sets real KernelBench generations use (:data:`COMMON_FLAG_SETS`),
  once per installation, with a line per item saying what is built and why.
* In the background at first use (:func:`start_background`): a build that found no header for its flags compiled
  without one and names it; the parent then builds it at low priority, so the next build with those flags has it,
  and (once per process) goes on with the common flag sets, so a first candidate of those finds its header too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from musaenv import _env
from musaenv._env import ext_cache_root, pch_cache_root
from musaenv.isolation.proctree import descendants
from musaenv.isolation.records import ProtocolError
from musaenv.toolchains.admission import admitted, release, try_admit
from musaenv.toolchains.builder_launch import builder_command
from musaenv.toolchains.job import JOB_VERSION, WarmupJob, read_report

__all__ = [
    "COMMON_FLAG_SETS",
    "background_items",
    "run_items",
    "start_background",
    "wait_background",
    "warmup",
    "warmup_items",
]

log = logging.getLogger(__name__)

# extra_cflags of real KernelBench generations, most common first ("-O3 --use_fast_math" is a g++ error).
COMMON_FLAG_SETS: tuple[tuple[str, ...], ...] = (
    ("-O3",),
    (),
    ("-O3", "-fopenmp"),
    ("-O3", "-march=native"),
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-mavx2", "-mfma"),  # -O3's header where its text does not depend on them (checked, ~2 s)
)
_WHY = {
    "bind": "binding objects (pybind11 module and common function types), shared by all usual flags, and the "
    "names only torch/extension.h declares (for compile-error verdicts)",
    "split": "precompiled torch/types.h for the candidate's own code",
    "full": "precompiled torch/extension.h for sources that use pybind11 or Python",
}
_BG_LOCK = threading.Lock()
_BG_PROCS: list[subprocess.Popen[bytes]] = []
_BG_SEEN: set[str] = set()
_COMMON_QUEUED = False  # this process has queued the common flag sets (once)


def warmup_items(flag_sets: Sequence[Sequence[str]] = COMMON_FLAG_SETS, full: bool = True) -> list[dict[str, Any]]:
    """What ``musaenv warmup`` builds, in order: binding objects per binding key, a types header per flag set,
    extension headers for the first two sets (``-O3`` and none)."""
    from musaenv.toolchains.cpp.flagkeys import bind_key_flags

    items: list[dict[str, Any]] = []
    keys: set[tuple[str, ...]] = set()
    for flags in flag_sets:
        if bind_key_flags(flags) not in keys:
            keys.add(bind_key_flags(flags))
            items.append({"kind": "bind", "extra_cflags": list(flags)})
        items.append({"kind": "split", "extra_cflags": list(flags)})
    if full:
        items += [{"kind": "full", "extra_cflags": list(f)} for f in flag_sets[:2]]
    return items


def run_items(items: Sequence[dict[str, Any]], cache: Path, report: Callable[[str], None] | None = None) -> list[dict]:
    """Build ``items`` into the store at ``cache`` (inside the confined builder); returns one row per item."""
    from musaenv.toolchains.cpp.bindobj import module_object
    from musaenv.toolchains.cpp.compiler import torch_flags
    from musaenv.toolchains.cpp.header_names import extension_only_names
    from musaenv.toolchains.cpp.pch import PchStore

    store = PchStore(cache)
    rows = []
    for item in items:
        t0 = time.perf_counter()
        kind = str(item.get("kind"))
        flags = torch_flags(cache, "musaenv_warmup", item.get("extra_cflags") or (), (),
                            item.get("extra_include_paths") or ())  # fmt: skip
        ready = False
        if kind == "bind":
            ok = module_object(flags, cache, []) is not None
            # and the names only torch/extension.h declares, so that the first compile error naming an undeclared
            # identifier does not compute them while its verdict waits (~2 s)
            with tempfile.TemporaryDirectory(dir=cache) as names_tmp:
                ok = extension_only_names(flags, cache, Path(names_tmp)) is not None and ok
        else:
            ready = store.include_flags(kind, flags) is not None  # built before, or shared with flags keyed alike
            ok = store.build(kind, flags) is not None
        rows.append({"kind": kind, "extra_cflags": item.get("extra_cflags") or [], "ok": ok, "ready": ready,
                     "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
        if report:
            report(json.dumps(rows[-1]))
    return rows


def _spawn(items: Sequence[dict[str, Any]], timeout_s: float, background: bool) -> tuple[subprocess.Popen[bytes], Path]:
    tmp = ext_cache_root() / "tmp" / f"warmup-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True, exist_ok=True)
    job = WarmupJob(version=JOB_VERSION, items=[dict(i) for i in items], pch_cache=str(pch_cache_root()),
                    timeout_s=timeout_s, parent_pid=os.getpid(), background=background)  # fmt: skip
    (tmp / "spec.json").write_text(json.dumps(job.to_dict()))
    proc = subprocess.Popen(
        builder_command(tmp),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, cwd=str(tmp), env=_env.child_env(),
    )  # fmt: skip
    return proc, tmp


def warmup(
    flag_sets: Sequence[Sequence[str]] = COMMON_FLAG_SETS,
    full: bool = True,
    say: Callable[[str], None] = print,
    starting: Callable[[int, int, str], None] | None = None,
    finished: Callable[[int, int, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Build every item of :func:`warmup_items` (each in its own confined builder); ``say`` gets progress lines,
    ``starting``/``finished`` get (index, total, label) around each item (a progress display's hooks)."""
    import shutil

    rows = []
    items = warmup_items(flag_sets, full)
    for i, item in enumerate(items, start=1):
        flags = " ".join(item["extra_cflags"]) or "(no flags)"
        say(f"[{i}/{len(items)}] {item['kind']:<5} {flags}: {_WHY[item['kind']]}")
        label = f"{item['kind']} {flags}"
        if starting is not None:
            starting(i - 1, len(items), label)
        with admitted("cxx", f"warmup {label}"):  # machine-wide, by memory, as every build (admission.py)
            proc, tmp = _spawn([item], 1800.0, background=False)
            proc.wait()
        try:
            report = read_report(tmp / "result.json")
        except ProtocolError as e:  # a builder of another version: say why, not only FAILED
            say(f"        the builder's report was refused: {e}")
            report = None
        row = report.rows[0] if report and report.rows else {"kind": item["kind"], "ok": False}
        shutil.rmtree(tmp, ignore_errors=True)
        if row.get("ok") and row.get("ready"):
            say("        already there (built before, or the header of flags that key alike)")
        else:
            say(f"        {'done' if row.get('ok') else 'FAILED'} in {row.get('seconds', 0):.1f} s")
        rows.append(row)
        if finished is not None:
            finished(i, len(items), label)
    return rows


def background_items(wanted: Sequence[str], spec: dict[str, Any], common: bool) -> list[dict[str, Any]]:
    """What a background builder builds: the headers a build went without (``wanted``: ``split``/``full``) for
    its flags, then, when ``common``, the binding objects and ``types`` headers of :data:`COMMON_FLAG_SETS`
    (items already built are skipped in the builder, in milliseconds)."""
    items = [{"kind": k, "extra_cflags": list(spec.get("extra_cflags") or ()),
              "extra_include_paths": list(spec.get("extra_include_paths") or ())} for k in wanted]  # fmt: skip
    return items + (warmup_items(COMMON_FLAG_SETS, full=False) if items and common else [])


def start_background(wanted: Sequence[str], spec: dict[str, Any]) -> None:
    """Build the headers a build went without in a low-priority builder; the first such builder of a process
    goes on with the common flag sets (what ``musaenv warmup`` builds, less the ``extension`` headers), so a
    new generation's usual flags find their header ready. ``MUSAENV_BACKGROUND_WARMUP``: ``0`` off, ``wanted``
    only the build's own headers, anything else both."""
    global _COMMON_QUEUED
    setting = os.environ.get("MUSAENV_BACKGROUND_WARMUP", "1")
    if not wanted or setting == "0":
        return
    with _BG_LOCK:
        _BG_PROCS[:] = [p for p in _BG_PROCS if p.poll() is None]  # reap the finished ones
        if _BG_PROCS:
            return  # one at a time: the next build that misses a header asks again
        key = json.dumps(background_items(wanted, spec, common=False), sort_keys=True)
        if key in _BG_SEEN:
            return
        # A free build slot and the memory for it now, or no background build (a later miss asks again): headers
        # are an optimisation and give way to candidates' builds on a busy or short host (admission.py).
        slot = try_admit("cxx", f"headers {wanted}")
        if slot is None:
            return
        _BG_SEEN.add(key)
        items = background_items(wanted, spec, common=setting != "wanted" and not _COMMON_QUEUED)
        _COMMON_QUEUED = True
        log.info("building precompiled headers %s for %s in the background%s", wanted, items[0]["extra_cflags"],
                 ", then those of the common flag sets" if len(items) > len(wanted) else "")  # fmt: skip
        try:
            proc, tmp = _spawn(items, 1800.0, background=True)
        except BaseException:
            release(slot)
            raise
        _BG_PROCS.append(proc)
        # Reaped as soon as it ends (else a zombie child until the next background build, which may never come),
        # its spec directory removed and its build slot given back with it.
        threading.Thread(target=_reap, args=(proc, tmp, slot), name="musaenv-bg-warmup", daemon=True).start()


def _reap(proc: subprocess.Popen[bytes], tmp: Path, slot: int | None = None) -> None:
    try:
        proc.wait()
    finally:
        release(slot)
        shutil.rmtree(tmp, ignore_errors=True)


def _cmd_warmup(
    args: Any,
    starting: Callable[[int, int, str], None] | None = None,
    finished: Callable[[int, int, str], None] | None = None,
) -> int:
    sets = [tuple(s.split()) for s in args.flags] if args.flags else COMMON_FLAG_SETS
    print(f"musaenv warmup: building once, for every later C++ build ({len(sets)} flag sets); this takes a few minutes")
    t0 = time.perf_counter()
    rows = warmup(sets, full=not args.no_full, starting=starting, finished=finished)
    print(f"warmup done in {time.perf_counter() - t0:.0f} s: {sum(r.get('ok', False) for r in rows)}/{len(rows)} built")
    return 0 if all(r.get("ok") for r in rows) else 1


def add_warmup_subparser(sub: Any) -> None:
    """Register ``musaenv warmup`` on the CLI's subparsers."""
    w = sub.add_parser("warmup", help="precompile the headers and binding objects of the common C++ flag sets")
    w.add_argument(
        "--flags",
        action="append",
        default=None,
        help='a flag set to prepare, e.g. --flags="-O3 -fopenmp" (repeatable; default: the common sets)',
    )
    w.add_argument("--no-full", action="store_true", help="skip torch/extension.h headers (pybind11 sources only)")
    w.set_defaults(func=_cmd_warmup)


def background_tree() -> set[int]:
    """Pids of this process's running background header builds and everything under them: ours, bounded, and
    ending on their own (leak checks leave them out; :func:`wait_background` waits for them)."""
    with _BG_LOCK:
        live = [p.pid for p in _BG_PROCS if p.poll() is None]
    return {pid for root in live for pid in (root, *descendants(root))}


def wait_background(timeout_s: float = 1800.0) -> None:
    """Wait for this process's background header builds to end (tests that check no process outlived them)."""
    with _BG_LOCK:
        procs = list(_BG_PROCS)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=timeout_s)


def first_use_note() -> str | None:
    """A line for the CLI when this cache has built no C++ yet (what the first build does once, and why)."""
    if any((pch_cache_root() / "bind").glob("*/module.o")):
        return None
    return ("first C++ build in this cache: the pybind11 binding objects every later build links (~20 s of CPU) "
            "compile beside the candidate's code, once; precompiled headers for its flags, then for the common flag "
            "sets, follow in the background at low priority (`musaenv warmup` prepares them ahead)")  # fmt: skip
