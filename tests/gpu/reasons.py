"""Why an evaluation ended as it did, for assertion messages: pytest shortens a dict to its first keys, and the first
run on a GPU showed ``{'stage': 'runtime_error', ...}`` with the reason cut off."""

from __future__ import annotations

from typing import Any


def why(r: Any) -> str:
    """The stage, the messages and the tails of the worker's and the compiler's logs of an ``EvalResult``."""
    d = r.to_dict()
    parts = [f"stage {d['stage']}", "messages: " + "; ".join(d.get("messages") or [])]
    parts += [f"{k}: {str(d[k])[-1500:]}" for k in ("runtime_log", "compiler_log") if d.get(k)]
    return "\n".join(parts)
