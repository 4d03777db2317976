"""Time musaenv's first build of named generations of a corpus, musaenv's side only (no ``load_inline``).

For a change to one stratum of ``benchmarks/cuda_corpus.py``'s sample (e.g. its kernel errors) measured before and
after without the ~30 min of the whole run: each named generation is built compile-only in a fresh process by
``build_extension`` (the runner of ``benchmarks/cuda_corpus_time.py``, a unique comment in its CUDA source so
nothing is cached), CPU seconds of the process tree and wall. ``--warm`` first warms the header store per C++ flag
set (``musaenv warmup``), as the whole run does. The cache is ``MUSAENV_CACHE_DIR``'s (set it to a fresh or a copied
folder so before and after start from the same state).

Usage: ``python benchmarks/cuda_corpus_names.py runs/NAME --git-dir DIR --rev REV --names a,b,c [--warm]
[--out out/cuda_corpus_names.json]``. Prints, writes JSON, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks/ is on the path

from benchmarks.cuda_build_speed import _warm_headers
from benchmarks.cuda_corpus import classify, generations_from_files, read_directory, read_git
from benchmarks.cuda_corpus_time import _musaenv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", help="a directory, or with --git-dir the path inside the repository")
    ap.add_argument("--git-dir")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--names", required=True, help="generation names, comma-separated")
    ap.add_argument("--warm", action="store_true", help="warm the header store per C++ flag set first")
    ap.add_argument("--out", default="out/cuda_corpus_names.json")
    args = ap.parse_args()
    names = args.names.split(",")
    files = read_git(Path(args.git_dir), args.rev, args.corpus) if args.git_dir else read_directory(Path(args.corpus))
    found = {c.name: c for c in map(classify, generations_from_files(files)) if c.name in names}
    out: dict[str, Any] = {"load_start": os.getloadavg(), "headers": {}, "rows": []}
    if args.warm:
        for flags in sorted({tuple(found[n].kwargs[0].get("extra_cflags") or ()) for n in names}):
            out["headers"][" ".join(flags) or "(none)"] = _warm_headers(list(flags))
    tag = uuid.uuid4().hex[:8]
    for i, n in enumerate(names):
        kw = dict(found[n].kwargs[0])
        cuda = list(kw["cuda_sources"])
        kw["cuda_sources"] = [*cuda[:-1], cuda[-1] + f"\n// musaenv corpus names benchmark {tag}{i}\n"]
        kw["name"] = f"corpus_{tag}{i}"
        with tempfile.TemporaryDirectory(prefix="musaenv-corpus-names-") as root:
            res = {"name": n, **_musaenv(kw, Path(root)), "load": os.getloadavg()}
        out["rows"].append(res)
        print(f"{n:40s} {res['cpu_s']:6.1f} CPU s {res['process_wall_s']:6.1f} s ok={res.get('ok')} "
              f"{res.get('tier')}", flush=True)  # fmt: skip
    out["load_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
