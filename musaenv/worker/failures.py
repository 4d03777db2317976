"""How a candidate worker's evaluation ends early: :class:`CandidateFailure` (a stage and a log) and helpers."""

from __future__ import annotations

import traceback

__all__ = ["TRACEBACK_CHARS", "CandidateFailure", "InputDrawError", "format_exc"]

TRACEBACK_CHARS = 6000


class InputDrawError(Exception):
    """Drawing the task's inputs (the reference program's ``get_inputs``) failed; carries the traceback."""


class CandidateFailure(Exception):
    """Ends a candidate evaluation with a stage and a log."""

    def __init__(self, stage: str, log: str, flags: tuple[str, ...] = ()) -> None:
        super().__init__(log)
        self.stage, self.log, self.flags = stage, log, flags


def format_exc(exc: BaseException) -> str:
    """The traceback of ``exc``, truncated to its last TRACEBACK_CHARS characters."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-TRACEBACK_CHARS:]
