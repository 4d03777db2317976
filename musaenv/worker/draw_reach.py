"""What a timed call's draw and the steps after it, up to its window, reach in a candidate's worker (worker side).

The worker's :class:`~musaenv.verification.draw_watch.DrawWatch` is built here, before the candidate's code loads.
"""

from __future__ import annotations

import json
import json.encoder
import os
import select
from collections.abc import Mapping
from typing import Any

from musaenv.isolation import channel, messages, records
from musaenv.isolation.channel import Channel
from musaenv.isolation.messages import CandidateRequest
from musaenv.timing import timers
from musaenv.timing.timers import DeviceClock
from musaenv.verification.draw_watch import DrawWatch
from musaenv.worker import harness, trials
from musaenv.worker.harness import CudaToDevice, ProgramModule, to_device

__all__ = ["draw_watch"]


def draw_watch(program: ProgramModule, req: CandidateRequest) -> DrawWatch:
    """The snapshot of what runs from a timed call's draw to its window (:mod:`musaenv.verification.draw_watch`):
    the harness's drawing code, then the timing loop up to the parent's clock (the cache flush, the ``time_ready``
    word through the channel: its record, JSON, ``os.write``), each with the classes and modules' globals it looks
    names up in. Found from outside: ``torch.Tensor.fill_`` replaced, which the cache flush calls after the
    draw, computed half of each call's work from the timing loop's frame (speedup 0.006 -> 0.018, ``correct``)
    and put itself back before the end of the timed calls, where every name is compared."""
    sizes = program.size_names | {k for shape in req.shapes for k in shape}
    classes = [ProgramModule, CudaToDevice, DeviceClock, trials.ChannelGate, Channel, records.Message]
    classes += [messages.TimeReady, json.JSONEncoder]
    ours: dict[str, Mapping[str, Any]] = {c.__qualname__: vars(c) for c in classes}
    modules: dict[str, Any] = {"harness": harness, "timers": timers, "trials": trials, "channel": channel}
    modules.update({"records": records, "json": json, "json.encoder": json.encoder, "os": os, "select": select})
    ours.update({name: vars(m) for name, m in modules.items()})
    ours["json's default encoder"] = vars(json._default_encoder)  # type: ignore[attr-defined]
    reach = [*classes, harness.seed_all, to_device, timers.time_gated, timers._gated_call, timers._gated_args]
    reach += [json.dumps, records.Message.to_dict]
    return DrawWatch(program.module, sizes, ours, reach)
