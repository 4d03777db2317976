"""A corpus of candidates through ``musaenv eval --json`` with one shared cache, as an auditor would run it.

Every ``hostile_*.py`` in the corpus folder runs first, then every ``honest_*.py``, all against one cache
directory; then the honest ones again against a fresh cache. Reported per candidate: verdict, score, flags,
reference time; afterwards, the traces an evaluation could leave: processes still running that were started
meanwhile (this process is a child subreaper, so orphans stay visible), new entries in ``$HOME``, site-packages
and the evaluations' own ``TMPDIR``, and cached modules without the parent's sealed
manifest. A hostile candidate must score <= 0 and leave no trace; an honest one must be ``correct``, with the
same verdict after the hostile ones as in the fresh cache (reference times are compared as a ratio: they are
measurements).

Usage: ``python benchmarks/hostile_corpus.py CORPUS_DIR [--task l1_relu] [--out out/hostile_corpus.json]``.
Writes JSON, prints a table, never asserts.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import site
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from musaenv.isolation.integrity import read_sealed


def _listing(d: Path) -> set[str]:
    try:
        return {p.name for p in d.iterdir()}
    except OSError:
        return set()


def _snapshot(tmp: Path) -> dict[str, set[str]]:
    dirs = [Path.home(), tmp, *map(Path, site.getsitepackages())]
    return {str(d): _listing(d) for d in dirs}


def _live_descendants() -> list[int]:
    """Processes below this one that are still running (orphans come here: this process is a subreaper)."""
    from musaenv.isolation.proctree import descendants

    out = []
    for pid in descendants(os.getpid()):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            out.append(pid)
    return out


def _eval(task: str, candidate: Path, cache: Path, tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "MUSAENV_CACHE_DIR": str(cache), "TMPDIR": str(tmp)}
    env.pop("MUSAENV_KEY_DIR", None)  # each cache its own key (<cache>.keys)
    cmd = [sys.executable, "-m", "musaenv.cli", "eval", "--task", task, "--candidate", str(candidate),
           "--backend", "cpu", "--json"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    try:
        d = json.loads(out.stdout)
    except ValueError:
        return {"stage": f"cli failed rc={out.returncode}", "stderr": out.stderr[-800:]}
    keys = ("stage", "score", "flags", "ref_runtime_ms", "speedup", "messages")
    return {k: d.get(k) for k in keys}


def _unsealed(cache: Path) -> list[str]:
    os.environ["MUSAENV_KEY_DIR"] = str(cache) + ".keys"  # the key the evaluations of this cache used
    bad = []
    for so in (cache / "ext").glob("musaenv_*/*.so"):
        m = read_sealed(so.parent / "manifest.json", "ext")
        if m is None or m.get("name") != so.parent.name:
            bad.append(str(so))
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--task", default="l1_relu")
    ap.add_argument("--out", default="out/hostile_corpus.json")
    args = ap.parse_args()
    hostile = sorted(args.corpus.glob("hostile_*.py"))
    honest = sorted(args.corpus.glob("honest_*.py"))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: anything an evaluation orphans stays visible here
    shared, fresh = Path(tempfile.mkdtemp(prefix="musaenv-corpus-shared-")), Path(tempfile.mkdtemp(prefix="fresh-"))
    tmp = Path(tempfile.mkdtemp(prefix="musaenv-corpus-tmp-"))  # the evaluations' TMPDIR: their leftovers show
    before = _snapshot(tmp)
    rows: dict[str, dict[str, Any]] = {}
    for f in hostile + honest:
        rows[f.stem] = {"shared": _eval(args.task, f, shared, tmp)}
    after = _snapshot(tmp)
    new_entries = {d: sorted(after[d] - before[d]) for d in before if after[d] - before[d]}
    survivors = _live_descendants()
    for f in honest:
        rows[f.stem]["fresh"] = _eval(args.task, f, fresh, tmp)
    report = {"rows": rows, "new_entries": new_entries, "new_processes_alive": survivors,
              "unsealed_modules": _unsealed(shared)}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    print(f"{'candidate':<28}{'verdict':<15}{'score':>7}  {'fresh':<10}{'ref ms ratio':>13}  flags")
    for name, r in rows.items():
        s, fr = r["shared"], r.get("fresh", {})
        ratio = ""
        if s.get("ref_runtime_ms") and fr.get("ref_runtime_ms"):
            ratio = f"{s['ref_runtime_ms'] / fr['ref_runtime_ms']:.2f}"
        score = s.get("score")
        print(f"{name:<28}{s.get('stage')!s:<15}{score if score is None else round(score, 2)!s:>7}  "
              f"{fr.get('stage', '')!s:<10}{ratio:>13}  {s.get('flags')}")  # fmt: skip
    print(f"new entries in $HOME, site-packages and the evaluations' TMPDIR: {new_entries}")
    print(f"processes the evaluations left running: {survivors}")
    print(f"cached modules without a sealed manifest: {report['unsealed_modules']}")


if __name__ == "__main__":
    main()
