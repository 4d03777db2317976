"""Builder subprocess: ``python -m musaenv.backends.builder TMPDIR``.

Reads ``TMPDIR/spec.json``, builds it into ``TMPDIR`` (a private build directory, so no lock is ever shared)
and writes ``TMPDIR/result.json``. Build modes ``fast`` and ``pch`` drive the compiler directly with torch's
own flags (:mod:`musaenv.backends.fastbuild`, no torch import once the flag template is cached); mode
``torch``, and any build those cannot take, goes through torch's own ``load_inline``. The parent enforces the
timeout and kills this process's whole session when it is exceeded.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

log = logging.getLogger("musaenv.backends.builder")


def _fast(spec: dict[str, Any], tmp: Path) -> dict[str, object] | None:
    if spec.get("build_mode", "fast") not in ("fast", "pch") or not spec.get("pch_cache"):
        return None
    try:
        from musaenv.backends.fastbuild import fast_build

        res = fast_build(spec, spec["name"], tmp, Path(spec["pch_cache"]), spec.get("build_mode", "fast"))
    except Exception:  # a harness bug must not cost the candidate its build: torch's path still works
        log.warning("fast build failed, using load_inline:\n%s", traceback.format_exc())
        return None
    if res is None:
        return None
    return {"ok": res.ok, "log": res.log, "tier": res.tier, "steps": res.steps}


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
        ce.load_inline(name=spec["name"], build_directory=str(tmp), verbose=False, **kwargs)
    except Exception as e:  # compiler errors arrive as RuntimeError carrying the compiler output
        return {"ok": False, "log": f"{type(e).__name__}: {e}", "tier": "torch"}
    return {"ok": True, "log": "", "tier": "torch"}


def _build(tmp: Path) -> dict[str, object]:
    spec = json.loads((tmp / "spec.json").read_text())
    return _fast(spec, tmp) or _torch(spec, tmp)


def main(argv: list[str]) -> int:
    """Entry point; returns the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tmp = Path(argv[0])
    try:
        result = _build(tmp)
    except BaseException:  # the harness must always leave a readable result
        result = {"ok": False, "log": traceback.format_exc()}
    (tmp / "result.json").write_text(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
