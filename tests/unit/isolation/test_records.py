"""The record machinery (musaenv.isolation.records) on records defined here: what each annotation accepts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from musaenv.isolation.records import Message, ProtocolError, ProtocolMismatch, decode


@dataclass(frozen=True)
class _Inner(Message):
    n: int


@dataclass(frozen=True)
class _Outer(Message):
    TYPE: ClassVar[str] = "outer"
    count: int
    ratio: float
    on: bool
    names: list[str]
    inner: _Inner | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    anything: Any = None


def _good(**over: Any) -> dict[str, Any]:
    return {"type": "outer", "count": 1, "ratio": 0.5, "on": True, "names": ["a"], "inner": {"n": 2},
            "extra": {}, "anything": [1, "x"]} | over  # fmt: skip


def test_round_trip_with_a_nested_record() -> None:
    rec = _Outer.from_dict(_good())
    assert rec.inner == _Inner(2) and rec.to_dict() == _good()
    assert next(iter(rec.to_dict())) == "type"
    assert _Outer.from_dict(_good(inner=None)).inner is None


@pytest.mark.parametrize(
    "over",
    [
        {"count": True},
        {"count": 1.0},
        {"on": 1},
        {"ratio": True},
        {"ratio": "0.5"},
        {"names": ["a", 3]},
        {"names": "a"},
        {"inner": {"n": "2"}},
        {"inner": 2},
        {"extra": []},
    ],
)
def test_json_types_are_held_to_the_annotation(over: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        _Outer.from_dict(_good(**over))


def test_int_is_a_float_and_any_is_anything() -> None:
    assert _Outer.from_dict(_good(ratio=2, anything={"k": None})).ratio == 2


def test_the_type_key_and_the_field_set_must_match() -> None:
    with pytest.raises(ProtocolError, match="expected type 'outer'"):
        _Outer.from_dict(_good(type="other"))
    with pytest.raises(ProtocolError, match=r"unknown fields \['more'\], missing \[\]"):
        _Outer.from_dict(_good(more=1))
    body = _good()
    del body["anything"]  # a default does not make a field optional on the wire
    with pytest.raises(ProtocolError, match=r"missing \['anything'\]"):
        _Outer.from_dict(body)
    with pytest.raises(ProtocolError, match="not a JSON object"):
        _Outer.from_dict([1])


def test_decode_picks_the_named_record_only_among_the_allowed() -> None:
    assert isinstance(decode(_good(), _Outer), _Outer)
    with pytest.raises(ProtocolError, match="unexpected message type 'outer'"):
        decode(_good(), _Inner)


def test_a_mismatch_names_both_versions() -> None:
    e = ProtocolMismatch(7, 9)
    assert isinstance(e, ProtocolError) and "version 7" in str(e) and "version 9" in str(e)
