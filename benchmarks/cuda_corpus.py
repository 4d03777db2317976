"""How do real CUDA generations fare? The fast tier's share of a corpus, and a sample timed against ``load_inline``.

A corpus is a folder of generated KernelBench answers (``*.py``, one ``load_inline`` program each), read from a
directory or from a fetched repository's git dir at a commit (``--git-dir DIR --rev REV``, ``corpus`` is then the
path inside it); nothing of it is committed. Upstream compile labels come from any ``eval_results.json`` in it
(KernelBench's records: ``solution_id`` and ``compiled``), matched to ``<solution_id>.py`` or
``<solution_id>_kernel.py``. Nothing of a generation is executed or imported: its ``load_inline`` call is read by
musaenv's own parser (:func:`musaenv.verification.static_sources.find_builds`).

1. **Share** (compiles nothing, the whole corpus): which generations the CUDA split takes, the same two checks
   the build runs (:func:`musaenv.toolchains.cuda.split.split_cuda`,
   :func:`musaenv.toolchains.cuda.fast.split_unfit`), over
   all and over those that compiled upstream, with the reasons of the rest counted; also over the calls that reach
   a build at all (torch's ``load_inline`` signature refuses some before any build, e.g. no ``cpp_sources``).
2. **Sample** (``--sample N``, seeded, stratified): half successes (compiled upstream, one ``load_inline`` call),
   half kernel errors (failed upstream, taken by the split, and nvcc fails on its device unit: prescreened, about
   a second each). Each is built compile-only by ``load_inline`` (fresh process, ``TORCH_CUDA_ARCH_LIST=9.0``,
   as ``benchmarks/cuda_build_speed.py``) and by musaenv's ``build_extension`` (fresh process, empty extension
   cache, header store warmed per C++ flag set with ``musaenv warmup`` first), each twice: first build, then the
   same source again (cached). CPU seconds (the process tree's) and wall; medians and ratios.

Usage: ``python benchmarks/cuda_corpus.py runs/NAME --git-dir /path/repo.git --rev 5b02b31 [--sample 8]
[--seed 0] [--out out/cuda_corpus.json]``. Prints, writes JSON, never asserts.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.cuda.chunks import with_linkage
from musaenv.toolchains.cuda.compile import _CUDA_PRELUDE
from musaenv.toolchains.cuda.fast import split_unfit
from musaenv.toolchains.cuda.split import _UNSUPPORTED, _blank, _chunks, _kernel, _place, _rewrite_launches, split_cuda
from musaenv.toolchains.cuda.templates import HostTemplates, launch_instances, literal_macros
from musaenv.verification.static_names import build_symbols, is_load_inline_name
from musaenv.verification.static_sources import RecoveredBuild, find_builds

LABELS_FILE = "eval_results.json"
REFUSED = "load_inline refuses the call before any build"  # its TypeError: no build of any tier


@dataclass(frozen=True)
class Generation:
    """One generated answer and its upstream label (``None``: the corpus has none)."""

    name: str
    text: str
    compiled: bool | None = None


@dataclass
class Classified:
    """What musaenv makes of one generation without compiling it.

    Attributes:
        calls: ``load_inline`` calls found.
        kwargs: The recovered keyword arguments of each call (``None`` when a call could not be recovered).
        fast: True when the CUDA split takes every call.
        reason: Why not (the first call that the split does not take), ``None`` when it does.
    """

    name: str
    compiled: bool | None
    calls: int = 0
    kwargs: list[dict[str, Any]] = field(default_factory=list)
    fast: bool = False
    reason: str | None = None


# --- reading a corpus ---------------------------------------------------------------------------------------------


def _label_table(text: str) -> dict[str, bool]:
    data = json.loads(text)
    rows = data.values() if isinstance(data, dict) else data
    return {str(r["solution_id"]): bool(r["compiled"]) for r in rows if isinstance(r, dict) and "compiled" in r}


def generations_from_files(files: dict[str, str]) -> list[Generation]:
    """Generations of a corpus given as ``path -> text``: every ``.py`` file, labelled from ``eval_results.json``."""
    labels: dict[str, bool] = {}
    for path, text in files.items():
        if Path(path).name == LABELS_FILE:
            labels |= _label_table(text)
    out = []
    for path in sorted(p for p in files if p.endswith(".py")):
        stem = Path(path).stem
        name = stem[: -len("_kernel")] if stem.endswith("_kernel") and stem not in labels else stem
        out.append(Generation(name, files[path], labels.get(name)))
    return out


def read_directory(root: Path) -> dict[str, str]:
    """The ``.py`` and label files under ``root``."""
    paths = [p for p in root.rglob("*") if p.is_file() and (p.suffix == ".py" or p.name == LABELS_FILE)]
    return {str(p.relative_to(root)): p.read_text(errors="replace") for p in paths}


def read_git(git_dir: Path, rev: str, sub: str) -> dict[str, str]:
    """The ``.py`` and label files under ``sub`` at ``rev`` of a git dir (no work tree needed)."""
    names = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", rev, "--", sub],
                           capture_output=True, text=True, check=True).stdout.split("\n")  # fmt: skip
    wanted = [n for n in names if n.endswith(".py") or Path(n).name == LABELS_FILE]
    batch = "".join(f"{rev}:{n}\n" for n in wanted).encode()
    raw = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch"], input=batch,
                         capture_output=True, check=True).stdout  # fmt: skip
    out, pos = {}, 0
    for n in wanted:
        head_end = raw.index(b"\n", pos)
        size = int(raw[pos:head_end].split()[2])
        out[n] = raw[head_end + 1 : head_end + 1 + size].decode(errors="replace")
        pos = head_end + 1 + size + 1
    return out


# --- the fast tier's share (no compiler) --------------------------------------------------------------------------


def _kwargs_of(build: RecoveredBuild) -> dict[str, Any] | str:
    """``load_inline``'s keyword arguments as recovered, or why they cannot be."""
    if build.unresolved:
        return f"arguments not recoverable ({', '.join(sorted(set(build.unresolved)))})"
    kinds: dict[str, list[str]] = {}
    for s in build.sources:
        kinds.setdefault(s.kind, []).append(s.text)
    if any(len(texts) > 1 for texts in kinds.values()):
        return "sources with several values (branch-dependent)"
    if "cuda" not in kinds:
        return "no cuda_sources"
    kw: dict[str, Any] = {"cpp_sources": kinds.get("cpp", []), "cuda_sources": kinds["cuda"]}
    kw |= {k: list(v) for k, v in build.flags_by_keyword.items()}
    if build.functions is not None:
        kw["functions"] = build.functions
    return kw


def why_unsplittable(source: str) -> str:
    """The first thing in a CUDA source that :func:`split_cuda` cannot place (a diagnostic for the count: the
    verdict is ``split_cuda``'s own; its steps are followed with its own helpers)."""
    code = _blank(source)
    if code is None:
        return "unbalanced comment or literal"
    m = _UNSUPPORTED.search(code)
    if m:
        word = re.sub(r"\s+", " ", m.group(0)).strip(" {=")
        return "raw string literal" if word == 'R"' else "namespace block" if "namespace" in word else word
    chunks = _chunks(source, code)
    if not chunks:
        return "top level unreadable"
    chunks = with_linkage(chunks)
    if chunks is None:
        return "linkage the split cannot open (not C, nested, #-lines inside)"
    kernels: dict[str, Any] = {}
    hosts = HostTemplates(literal_macros(code))
    for chunk in chunks:
        where = _place(chunk)
        if where is None:
            if chunk.directive:
                return '#include "..."' if "include" in chunk.code else "conditional compilation"
            return "__host__ on device code" if "__host__" in chunk.code else "torch types in device code"
        if chunk.linkage and (
            where == "both" or (where == "device" and (_kernel(chunk) is None or "template" in chunk.code))
        ):
            return 'extern "C" on a variable, a template or a copy in each unit'
        if where == "device" and "__global__" in chunk.code:
            k = _kernel(chunk)
            if k is None:
                return "template kernel of another shape" if "template" in chunk.code else "kernel head unreadable"
            if k.name in kernels and kernels[k.name].params != k.params:
                return "overloaded kernel"
            kernels.setdefault(k.name, k)
        elif where == "host":
            hosts.add_chunk(chunk.code)
            if _rewrite_launches(chunk.text, chunk.code, kernels, hosts.macros, hosts) is None:
                return f"launch the split cannot read ({_launch_reason(chunk.code, kernels, hosts.macros)})"
    if kernels and hosts.instances({n: k.tparams for n, k in kernels.items() if k.tparams}) is None:
        return "a host template called other than by calls the split reads"
    return "no kernel" if not kernels else "host code names device code"


def _launch_reason(code: str, kernels: dict[str, Any], macros: dict[str, str | None]) -> str:
    """Which kind of launch in a host chunk the split could not read (a diagnostic only)."""
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(?:<([^<>;{}()]*)>)?\s*<<<", code):
        k = kernels.get(m.group(1))
        if k is None:
            return "not a kernel defined before it"
        if k.tparams and not m.group(2):
            return "template arguments left to deduction"
        if k.tparams and code.lstrip().startswith("template"):
            return "in a host template"
        targs = " ".join((m.group(2) or "").split())
        if k.tparams and launch_instances(targs, k.tparams, code, m.start(), macros) is None:
            return f"template arguments <{targs}>"
    return "other"


def call_refused(node: ast.Call) -> str | None:
    """torch's ``TypeError`` when its ``load_inline`` signature refuses the call as written (a missing
    ``cpp_sources``, an unknown keyword), raised before any build, as musaenv's hook raises it
    (:func:`musaenv.worker.loader_hook.with_signature_of`); ``None`` when it binds or ``*``/``**`` arguments leave
    it unknown."""
    import inspect

    from torch.utils.cpp_extension import load_inline

    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return None
    try:
        inspect.signature(load_inline).bind(*node.args, **{str(k.arg): k.value for k in node.keywords})
    except TypeError as e:
        return str(e)
    return None


def _call_verdict(kw: dict[str, Any]) -> str | None:
    try:
        spec = BuildSpec.from_load_inline({**kw, "name": "corpus"}, "cuda", compile_only=True).to_dict()
    except (TypeError, ValueError) as e:
        return f"load_inline would refuse it ({type(e).__name__})"
    source = "\n".join(spec.get("cuda_sources") or ())
    split = split_cuda(source, _CUDA_PRELUDE)
    why = split_unfit(spec, True, split is not None)
    if why is not None and split is None and why.startswith("the .cu source"):
        return f"not splittable: {why_unsplittable(source)}"
    return why


def classify(gen: Generation) -> Classified:
    """Whether the CUDA split takes every ``load_inline`` call of ``gen`` (``fast``), else the first reason."""
    out = Classified(gen.name, gen.compiled)
    try:
        tree = ast.parse(gen.text)
    except (SyntaxError, ValueError):
        out.reason = "python syntax error"
        return out
    sym = build_symbols(tree)
    builds = find_builds(gen.text, sym)
    calls = [n for n in sym.nodes if isinstance(n, ast.Call) and is_load_inline_name(sym.resolve(n.func))]
    out.calls = len(builds)
    if not builds:
        out.reason = "no load_inline call"
    for b, node in zip(builds, calls, strict=True):
        kw = _kwargs_of(b)
        out.kwargs.append(kw if isinstance(kw, dict) else {})
        refused = call_refused(node)
        why = f"{REFUSED}: {refused}" if refused else kw if isinstance(kw, str) else _call_verdict(kw)
        out.reason = out.reason or why
    out.fast = out.reason is None
    return out


def recoverable(c: Classified) -> bool:
    """Every call's arguments were recovered and hold a CUDA source."""
    return c.calls > 0 and all(c.kwargs) and not (c.reason or "").startswith(("arguments", "no cuda", "sources"))


def share(rows: list[Classified]) -> dict[str, Any]:
    """Counts of the split's share over ``rows`` and the reasons of the rest (coarse: the text before ``:``)."""
    rec = [r for r in rows if recoverable(r)]
    fast = sum(r.fast for r in rec)
    builds = [r for r in rec if not (r.reason or "").startswith(REFUSED)]  # calls that reach a build
    reasons = Counter(re.sub(r"(?<=build): .*", "", r.reason or "") for r in rec if not r.fast)
    return {"generations": len(rows), "recoverable": len(rec), "fast": fast,
            "fast_share": round(fast / len(rec), 4) if rec else None, "builds": len(builds),
            "fast_share_of_builds": round(fast / len(builds), 4) if builds else None,
            "reasons": dict(reasons.most_common()),
            "unrecoverable": dict(Counter(r.reason for r in rows if not recoverable(r)).most_common())}  # fmt: skip


def shares(rows: list[Classified]) -> dict[str, Any]:
    """The share over all generations and over those that compiled upstream (when the corpus has labels)."""
    out = {"all": share(rows)}
    if any(r.compiled is not None for r in rows):
        out["compiled_upstream"] = share([r for r in rows if r.compiled])
        out["failed_upstream"] = share([r for r in rows if r.compiled is False])
    return out


def strata(rows: list[Classified], seed: int) -> tuple[list[Classified], list[Classified]]:
    """Seeded orders of the two sample pools: successes (compiled upstream, one recoverable call) and kernel-error
    candidates (failed upstream, one call the split takes; the device prescreen decides which are kernel errors)."""
    rng = random.Random(seed)
    ok = [r for r in rows if r.compiled and r.calls == 1 and recoverable(r)]
    bad = [r for r in rows if r.compiled is False and r.calls == 1 and r.fast]
    rng.shuffle(ok)
    rng.shuffle(bad)
    return ok, bad


def medians(values: list[float | None]) -> float | None:
    """Median of the values present, ``None`` when there are none."""
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 2) if got else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded, ``None`` when either is missing or ``b`` is 0."""
    return round(a / b, 2) if a is not None and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", help="a directory, or with --git-dir the path inside the repository")
    ap.add_argument("--git-dir", help="a repository's git dir (e.g. a fetched mirror)")
    ap.add_argument("--rev", default="HEAD", help="commit of --git-dir to read")
    ap.add_argument("--sample", type=int, default=0, help="generations to time (half successes, half errors)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/cuda_corpus.json")
    args = ap.parse_args()
    files = read_git(Path(args.git_dir), args.rev, args.corpus) if args.git_dir else read_directory(Path(args.corpus))
    rows = [classify(g) for g in generations_from_files(files)]
    results: dict[str, Any] = {"corpus": args.corpus, "git_dir": args.git_dir, "rev": args.rev, "seed": args.seed,
                               "share": shares(rows)}  # fmt: skip
    for part, s in results["share"].items():
        print(f"{part:18s} {s['generations']} generations, {s['recoverable']} recoverable, fast tier {s['fast']} "
              f"({s['fast_share']}; {s['fast_share_of_builds']} of the {s['builds']} that reach a build); "
              f"reasons {s['reasons']}")  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    if args.sample:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks/ is on the path
        from benchmarks.cuda_corpus_time import time_sample

        os.environ.setdefault("MUSAENV_CACHE_DIR", tempfile.mkdtemp(prefix="musaenv-corpus-cache-"))
        ok, bad = strata(rows, args.seed)
        results["sample"] = time_sample(ok, bad, args.sample, uuid.uuid4().hex[:8], out, results)
    out.write_text(json.dumps(results, indent=1, default=lambda o: asdict(o)))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
