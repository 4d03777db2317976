"""Exceptions for harness and usage problems.

A bad *candidate* never raises: it becomes an :class:`musaenv.types.EvalResult`.
Only problems with the harness itself or with how it is used raise, always from
:class:`MusaEnvError`, and each message says what was expected, what was found
and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "ConfigError",
    "EvaluatorError",
    "MusaEnvError",
    "TaskLoadError",
]


class MusaEnvError(Exception):
    """Base class of every exception musaenv raises on purpose."""


class ConfigError(MusaEnvError, ValueError):
    """A configuration value is out of range or of the wrong type."""


class TaskLoadError(MusaEnvError):
    """A task file or directory could not be loaded.

    The message names the file and the reason.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot load task file {path!r}: {reason}")


class BackendUnavailableError(MusaEnvError):
    """A backend was requested that this machine cannot provide."""


class EvaluatorError(MusaEnvError):
    """The evaluator itself failed (not the candidate): workers cannot start, etc."""
