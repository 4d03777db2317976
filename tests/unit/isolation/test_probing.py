"""The shape-probe worker's request is decoded strictly (defaults for what the client leaves out) and its reply
leaves out what was not measured, the form the client reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from musaenv.isolation.probing import ProbeReply, ProbeRequest
from musaenv.isolation.records import ProtocolError


def test_a_request_takes_the_defaults_of_what_the_client_leaves_out() -> None:
    req = ProbeRequest.read({"op": "check", "shape": {"dim": 8}, "real": True, "limit_s": 3})
    assert (req.op, req.shape, req.real, req.limit_s, req.repeats, req.source) == ("check", {"dim": 8}, True, 3, 2, "")
    assert ProbeRequest.read({"op": "check", "shape": None}).shape == {}
    assert ProbeRequest.read({"op": "load", "source": "x = 1"}).source == "x = 1"


@pytest.mark.parametrize(
    "forged",
    [
        ["check"],
        {"shape": {}},  # no op
        {"op": "exec", "source": "x"},
        {"op": "check", "real": "yes"},
        {"op": "check", "limit_s": "10"},
        {"op": "check", "repeats": 2.5},
        {"op": "check", "shape": [["dim", 8]]},
        {"op": "load", "source": 7},
        {"op": "check", "surplus": 1},
    ],
)
def test_a_malformed_request_is_refused_at_decoding(forged: Any) -> None:
    with pytest.raises(ProtocolError):
        ProbeRequest.read(forged)


def test_a_reply_sends_what_was_measured_and_a_failure_keeps_it() -> None:
    reply = ProbeReply(inputs=[[[2, 3], "float32"]], input_bytes=24)
    sent = json.loads(json.dumps(reply.failed("took too long", "meta_slow").wire()))
    assert sent == {"ok": False, "error": "took too long", "kind": "meta_slow", "inputs": [[[2, 3], "float32"]],
                    "input_bytes": 24}  # fmt: skip
    assert ProbeReply(ok=True).wire() == {"ok": True}
    assert ProbeReply.from_dict(reply.to_dict()) == reply
    with pytest.raises(ProtocolError, match="'flops'"):
        ProbeReply.from_dict({**reply.to_dict(), "flops": "many"})
