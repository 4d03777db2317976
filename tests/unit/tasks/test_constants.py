"""Module-level size constants: what a shape may set, how dependents follow, how the shown program is rewritten."""

from __future__ import annotations

from musaenv.tasks.constants import Slot, read_constants, render

SRC = """import torch
batch_size = 16  # rows
M = 1024 * 2
depth, height, width = 24, 48, 48
kernel_size = (3, 5)
layers = [64] * 3
groups = batch_size // 4
dim = 1
scale = 2.0
flag = True
"""


def test_literals_slots_and_dependents():
    c = read_constants(SRC)
    assert c.literals["M"] == 2048 and c.literals["height"] == 48 and c.literals["layers"] == [64, 64, 64]
    labels = [s.label() for s in c.slots]
    # 0/1, floats and bools are never varied; tuple and list elements are, one slot each
    assert labels == [
        "batch_size", "M", "depth", "height", "width", "kernel_size[0]", "kernel_size[1]",
        "layers[0]", "layers[1]", "layers[2]",
    ]  # fmt: skip
    assert [name for name, _ in c.dependents] == ["groups"]


def test_shape_recomputes_dependents_and_keeps_sequence_types():
    c = read_constants(SRC)
    slots = {s.label(): s for s in c.slots}
    shape = c.shape({slots["batch_size"]: 36, slots["kernel_size[1]"]: 7, slots["layers[1]"]: 31})
    assert shape == {"batch_size": 36, "kernel_size": (3, 7), "layers": [64, 31, 64], "groups": 9}
    assert c.shape({slots["M"]: 2048}) == {}  # unchanged values are not overrides
    assert c.normalise({"kernel_size": [3, 7]}) == {"kernel_size": (3, 7)}


def test_render_rewrites_values_and_keeps_comments():
    out = render(SRC, {"batch_size": 7, "height": 35, "kernel_size": (3, 7), "M": 1023})
    assert "batch_size = 7  # rows" in out
    assert "depth, height, width = 24, 35, 48" in out
    assert "kernel_size = (3, 7)" in out and "M = 1023" in out
    assert "groups = batch_size // 4" in out  # a dependent recomputes from the rewritten constant
    assert read_constants(out).literals["height"] == 35


def test_slot_order_is_stable():
    assert Slot("a", None, 3) < Slot("b", None, 2)
