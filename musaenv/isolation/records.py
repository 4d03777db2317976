"""The record machinery of the worker protocol: frozen dataclasses with a strict ``from_dict``.

:class:`Message` is the base of every record in :mod:`musaenv.isolation.messages` (which re-exports everything
here); :func:`decode` picks the record a received object names. Kept apart from the records themselves so that
module stays a list of messages.
"""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from enum import Enum
from typing import Any, ClassVar, TypeVar, Union

__all__ = ["Message", "ProtocolError", "ProtocolMismatch", "decode"]

M = TypeVar("M", bound="Message")


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message (defined here, not in :mod:`.channel`: the
    builder reads its job through these records and must not import NumPy for it)."""


class ProtocolMismatch(ProtocolError):
    """The peer speaks another protocol version (it runs other musaenv code)."""

    def __init__(self, theirs: object, ours: int) -> None:
        super().__init__(
            f"the worker speaks protocol version {theirs!r}, this evaluator version {ours}: it imported other "
            "musaenv code (check PYTHONPATH and the working directory of the evaluator's processes)"
        )
        self.theirs, self.ours = theirs, ours


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a decoded JSON value fits a field's annotation (element types of lists included)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is dict:  # JSON keys are strings; the values are checked as a list's items are
        (_, item) = typing.get_args(hint) or (str, Any)
        return isinstance(value, dict) and all(isinstance(k, str) and _conforms(v, item) for k, v in value.items())
    if isinstance(hint, type) and (issubclass(hint, Message) or _is_config(hint)):
        return isinstance(value, dict)
    if isinstance(hint, type) and issubclass(hint, Enum):  # a str-valued enum travels as its value
        return isinstance(value, str) and value in hint._value2member_map_
    return isinstance(hint, type) and isinstance(value, hint)


class Message:
    """Base of every record: ``to_dict`` and a strict ``from_dict``; subclasses are frozen dataclasses."""

    TYPE: ClassVar[str] = ""
    _hints: ClassVar[dict[str, Any] | None] = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object sent on the channel (nested records as objects, ``type`` first)."""
        out: dict[str, Any] = {"type": self.TYPE} if self.TYPE else {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, list):
                out[f.name] = [v.to_dict() if isinstance(v, Message) or _is_config(type(v)) else v for v in value]
            else:
                out[f.name] = value.to_dict() if isinstance(value, Message) or _is_config(type(value)) else value
        return out

    @classmethod
    def _field_hints(cls) -> dict[str, Any]:
        if cls.__dict__.get("_hints") is None:
            hints = typing.get_type_hints(cls)
            cls._hints = {f.name: hints[f.name] for f in fields(cls)}  # type: ignore[arg-type]
        assert cls._hints is not None
        return cls._hints

    @classmethod
    def from_dict(cls: type[M], d: Any) -> M:
        """Parse one received object.

        Raises:
            ProtocolError: not an object, another ``type``, an unknown or missing field, or a field of the wrong type.
        """
        if not isinstance(d, dict):
            raise ProtocolError(f"{cls.__name__}: not a JSON object")
        body = dict(d)
        if cls.TYPE and body.pop("type", None) != cls.TYPE:
            raise ProtocolError(f"{cls.__name__}: expected type {cls.TYPE!r}, got {d.get('type')!r}")
        hints = cls._field_hints()
        unknown, missing = sorted(set(body) - set(hints)), sorted(set(hints) - set(body))
        if unknown or missing:
            raise ProtocolError(f"{cls.TYPE or cls.__name__} message: unknown fields {unknown}, missing {missing}")
        values: dict[str, Any] = {}
        for name, hint in hints.items():
            value = body[name]
            if not _conforms(value, hint):
                raise ProtocolError(f"{cls.TYPE or cls.__name__} message: field {name!r} is {value!r:.80}")
            values[name] = _nested(value, hint)
        return cls(**values)


def _is_config(cls: type) -> bool:
    """A frozen config of :mod:`musaenv.config` (a JSON round trip of its own, validated on construction)."""
    return not issubclass(cls, Message) and callable(getattr(cls, "from_dict", None)) and hasattr(cls, "to_dict")


def _nested(value: Any, hint: Any) -> Any:
    """A conforming value with its nested records (a field's, or a list's items) parsed into their records."""
    candidates = (hint, *typing.get_args(hint))
    nested = [h for h in candidates if isinstance(h, type) and issubclass(h, Message)]
    if nested and isinstance(value, dict):
        return nested[0].from_dict(value)
    configs = [h for h in candidates if isinstance(h, type) and _is_config(h)]
    if configs and isinstance(value, dict):
        return _config(configs[0], value)
    enums = [h for h in candidates if isinstance(h, type) and issubclass(h, Enum)]
    if enums and isinstance(value, str):
        return enums[0](value)
    listed = [h for h in candidates if typing.get_origin(h) is list]
    if listed and isinstance(value, list):
        (item,) = typing.get_args(listed[0]) or (Any,)
        if isinstance(item, type) and issubclass(item, Message):
            return [item.from_dict(v) for v in value]
        if isinstance(item, type) and _is_config(item):
            return [_config(item, v) for v in value]
    return value


def _config(cls: type, value: Any) -> Any:
    """A frozen config (or a public record of :mod:`musaenv.types`) parsed by its own ``from_dict``, which validates
    it: its refusal is the message's."""
    try:
        return typing.cast(Any, cls).from_dict(value)
    except (TypeError, ValueError, KeyError) as e:
        raise ProtocolError(f"{cls.__name__}: {e}") from None


def decode(d: dict[str, Any], *allowed: type[Message]) -> Message:
    """Parse ``d`` as whichever of the ``allowed`` records its ``type`` names.

    Raises:
        ProtocolError: the type is none of them, or the record rejects the fields.
    """
    kind = d.get("type")
    for cls in allowed:
        if kind == cls.TYPE:
            return cls.from_dict(d)
    raise ProtocolError(f"unexpected message type {kind!r}")
