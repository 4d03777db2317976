"""Builder subprocess: ``python -m musaenv.backends.builder TMPDIR``.

Reads ``TMPDIR/spec.json``, builds it with torch's own ``load_inline`` into ``TMPDIR`` (a private build
directory, so no lock is ever shared), and writes ``TMPDIR/result.json``. The parent enforces the timeout
and kills this process's whole session when it is exceeded.
"""

from __future__ import annotations

import inspect
import json
import sys
import traceback
from pathlib import Path


def _build(tmp: Path) -> dict[str, object]:
    spec = json.loads((tmp / "spec.json").read_text())
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
        return {"ok": False, "log": f"{type(e).__name__}: {e}"}
    return {"ok": True, "log": ""}


def main(argv: list[str]) -> int:
    """Entry point; returns the process exit code."""
    tmp = Path(argv[0])
    try:
        result = _build(tmp)
    except BaseException:  # the harness must always leave a readable result
        result = {"ok": False, "log": traceback.format_exc()}
    (tmp / "result.json").write_text(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
