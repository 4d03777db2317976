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


MIXED = """import torch
batch_size = 2
num_classes = 1000
input_shape = (batch_size, 3, 224, 224)
sizes = [batch_size, 64]
"""


def test_literal_elements_of_a_display_naming_constants_are_slots():
    # KernelBench's ResNet18 writes its image size this way: without these slots it was never scaled down
    c = read_constants(MIXED)
    labels = [s.label() for s in c.slots]
    assert labels == ["batch_size", "num_classes", "input_shape[1]", "input_shape[2]", "input_shape[3]", "sizes[1]"]
    slots = {s.label(): s for s in c.slots}
    shape = c.shape({slots["batch_size"]: 3, slots["input_shape[2]"]: 31, slots["input_shape[3]"]: 33})
    assert shape == {"batch_size": 3, "input_shape": (3, 3, 31, 33), "sizes": [3, 64]}
    assert c.shape({slots["sizes[1]"]: 63}) == {"sizes": [2, 63]}  # the named element keeps following its constant


def test_render_rewrites_only_the_changed_literal_elements():
    c = read_constants(MIXED)
    slots = {s.label(): s for s in c.slots}
    out = render(MIXED, c.shape({slots["batch_size"]: 3, slots["input_shape[2]"]: 31}))
    assert "input_shape = (batch_size, 3, 31, 224)" in out and "batch_size = 3" in out
    assert read_constants(out).shape({}) == {}  # the rewritten program has these values as its own
    shown = read_constants(out)
    assert shown.default_of("input_shape") == (3, 3, 31, 224)
