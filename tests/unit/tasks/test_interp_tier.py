"""The interp tier: shapes Triton's CPU interpreter is judged at (derived in a real probe worker; no GPU needed)."""

from __future__ import annotations

import pytest

from musaenv.backends import BackendInfo
from musaenv.config import EvalConfig
from musaenv.errors import ConfigError
from musaenv.evaluator.plan import interpreter_shapes
from musaenv.tasks.derive import ShapeConfig, derive_shapes
from musaenv.tasks.probe import ProbeClient
from musaenv.tasks.shape_rules import leading_only
from musaenv.tasks.task import Task, tier_order

HEAD = "import torch\nimport torch.nn as nn\n\n"

# 33 MB a call at the cpu tier's budget: the interp tier must shrink it.
ROWS = (
    HEAD
    + """
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

batch_size = 4096
dim = 65536

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""
)

# 128 KB a call: its cpu tier fits the interp budget already.
SMALL = ROWS.replace("4096", "16").replace("65536", "1024")

# A Linear whose features are written in the module: only the batch can shrink, the weight stays 1024 x 1024.
FIXED_FEATURES = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1024, 1024)

    def forward(self, x):
        return self.fc(x)

batch_size = 8192

def get_inputs():
    return [torch.rand(batch_size, 1024)]

def get_init_inputs():
    return []
"""
)

# KernelBench level 1 problem 50 as the public runs have it (an AlexNet first layer): 224 x 224 written in get_inputs
# (lifted to dim_1), kernel 11. A direct convolution correct on a GPU loops 363 steps per program instance in the
# interpreter: at the byte budget alone (batch 52 at 44 x 44, 362 MFLOPs) its trials used 480 CPU s.
CONV = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self, num_classes=1000):
        super(Model, self).__init__()
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=96, kernel_size=11, stride=4, padding=2)

    def forward(self, x):
        return self.conv1(x)

batch_size = 256
num_classes = 1000

def get_inputs():
    return [torch.rand(batch_size, 3, 224, 224)]

def get_init_inputs():
    return [num_classes]
"""
)

# A square matmul (two inputs, no batch): 12 MB a call at the file's sizes, 2.1 GFLOPs.
MATMUL = (
    HEAD
    + """
class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)

N = 1024

def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]

def get_init_inputs():
    return []
"""
)

CFG = ShapeConfig(cpu_forward_ms=200.0)  # roomy: the rules are checked, not this busy machine's speed


@pytest.fixture(scope="module")
def client():
    with ProbeClient() as c:
        yield c


def _bytes(info: dict) -> int:
    return int(info["input_bytes"]) + int(info["output_bytes"])


def test_interp_tier_shrinks_within_its_budget_and_keeps_an_odd_multi_block_shape(client):
    d = derive_shapes(ROWS, CFG, client)
    cpu, interp = d.shapes["cpu"], d.shapes["interp"]
    assert len(interp) == 2, d.notes
    assert all(_bytes(i) <= CFG.interp_bytes for i in d.info["interp"])
    assert _bytes(d.info["interp"][0]) < _bytes(d.info["cpu"][0])
    # the batch (rows: the leading extent of the only input) is held at 2, then 3 in the odd shape; the rows keep
    # the largest length that fits: more than one 1,024-element block, and odd (a multiple of no power-of-two block)
    assert [s["batch_size"] for s in interp] == [2, 3], interp
    dims = [s.get("dim", 65536) for s in interp]  # a size at the file's value is not in the shape
    assert dims[0] >= cpu[0]["dim"] and all(n > 1024 for n in dims) and dims[1] % 2 == 1, interp
    assert any("batch_size held at 2" in n for n in d.notes), d.notes


def test_a_cpu_tier_within_the_budget_is_the_interpreters(client):
    d = derive_shapes(SMALL, CFG, client)
    assert "interp" not in d.shapes
    assert any(n.startswith("interp tier:") and "fit" in n for n in d.notes), d.notes
    task = Task(id="t", level=1, source=SMALL, shapes={k: tuple(v) for k, v in d.shapes.items()}, notes=tuple(d.notes))
    assert task.shapes_for("interp") == task.shapes_for("cpu") and task.tier_used("interp") == "cpu"
    said = interpreter_shapes(task, "interp", chosen=False)
    assert said["tier"] == "cpu" and "fit" in said["why"]


def test_sizes_fixed_in_the_module_keep_their_value_and_the_batch_shrinks(client):
    d = derive_shapes(FIXED_FEATURES, CFG, client)
    interp = d.shapes["interp"]
    assert interp[0]["batch_size"] < d.shapes["cpu"][0]["batch_size"]
    assert all(_bytes(i) <= CFG.interp_bytes for i in d.info["interp"])
    assert d.info["interp"][0]["state_bytes"] == d.info["cpu"][0]["state_bytes"]  # the 4 MB weight is not shrunk


def test_a_convolution_is_sized_by_the_interpreters_flops_with_its_batch_first(client):
    d = derive_shapes(CONV, CFG, client)
    interp, info = d.shapes["interp"], d.info["interp"]
    assert len(interp) == 2, d.notes
    assert all(int(i["flops"]) <= CFG.interp_flops and _bytes(i) <= CFG.interp_bytes for i in info), info
    assert [s["batch_size"] for s in interp] == [2, 3], interp
    # the image the 11 x 11 kernel needs, and more than one output row and column (stride 4, padding 2)
    assert all(s["dim_1"] >= 2 * 11 for s in interp) and interp[1]["dim_1"] % 2 == 1
    # the largest image within the budget: one step of the common factor larger would not fit
    assert int(info[0]["flops"]) > CFG.interp_flops // 2


def test_a_model_that_rejects_a_batch_of_two_gets_its_batch_scaled_with_the_rest(client):
    needs_four = ROWS.replace(
        "        return torch.softmax(x, dim=1)",
        "        if x.shape[0] < 4:\n            raise ValueError('a batch of at least 4')\n"
        "        return torch.softmax(x, dim=1)",
    )
    d = derive_shapes(needs_four, CFG, client)
    interp = d.shapes["interp"]
    assert not any("held at" in n for n in d.notes), d.notes
    assert all(s["batch_size"] >= 4 for s in interp) and all(_bytes(i) <= CFG.interp_bytes for i in d.info["interp"])


def test_a_matmul_without_a_batch_is_sized_by_flops(client):
    d = derive_shapes(MATMUL, CFG, client)
    interp, info = d.shapes["interp"], d.info["interp"]
    assert not any("held at" in n for n in d.notes), d.notes  # no variable is the leading extent of both inputs
    assert all(int(i["flops"]) <= CFG.interp_flops for i in info), info
    # the byte budget alone gave 512 x 512 (268 MFLOPs); several 64-wide blocks per axis remain
    assert all(64 < s["N"] < 512 for s in interp) and interp[1]["N"] % 2 == 1, interp


def test_a_batch_is_the_leading_extent_of_every_input_and_nothing_else():
    def reply(inputs: list, state: list | None = None) -> dict:
        return {"ok": True, "inputs": inputs, "state": state or [[96, 3, 11, 11]]}

    base = reply([[[256, 3, 224, 224], "float32"], ["scalar", "int"]])
    assert leading_only(base, reply([[[255, 3, 224, 224], "float32"], ["scalar", "int"]]))
    assert not leading_only(base, reply([[[256, 3, 223, 223], "float32"], ["scalar", "int"]]))  # an image size
    assert not leading_only(base, reply([[[255, 3, 224, 224], "float32"], ["scalar", "int"]], [[95, 3, 11, 11]]))
    assert not leading_only(base, base)  # num_classes: nothing changes
    two = reply([[[64, 32], "float32"], [[32, 16], "float32"]])
    assert not leading_only(two, reply([[[63, 32], "float32"], [[32, 16], "float32"]]))  # a matmul's M
    assert not leading_only(base, {"ok": False, "kind": "reject"})
    vector = reply([[[4096], "float32"]])  # a vector's length is its only extent, not a batch
    assert not leading_only(vector, reply([[[4095], "float32"]]))


def test_tier_order_and_what_an_interpreted_evaluation_says():
    assert tier_order("interp") == ("interp", "cpu", "gpu") and tier_order("cpu") == ("cpu", "gpu")
    derived = Task(id="t", level=1, source="", shapes={"cpu": ({"n": 4096},), "gpu": ({},), "interp": ({"n": 512},)})
    said = interpreter_shapes(derived, "interp", chosen=False)
    assert said["tier"] == "interp" and said["shapes"] == [{"n": 512}] and said["cpu_shapes"] == [{"n": 4096}]
    assert "interpreter-sized" in said["why"] and "same shapes" in said["why"]
    builtin = Task(id="b", level=1, source="", shapes={"cpu": ({"n": 7},), "gpu": ({},)})
    said = interpreter_shapes(builtin, "interp", chosen=False)
    assert said["tier"] == "cpu" and "no interp tier" in said["why"]
    said = interpreter_shapes(derived, "cpu", chosen=True)
    assert said["tier"] == "cpu" and said["shapes"] == [{"n": 4096}] and "EvalConfig.tier" in said["why"]


def test_config_accepts_the_interp_tier_and_validates_its_budget():
    assert EvalConfig(tier="interp").tier == "interp"
    with pytest.raises(ConfigError):
        ShapeConfig(interp_bytes=64 << 20)  # above the cpu tier's budget
    with pytest.raises(ConfigError):
        ShapeConfig(interp_flops=0)


def test_triton_on_the_cpu_draws_the_interp_tier(monkeypatch: pytest.MonkeyPatch):
    import musaenv.backends as backends
    import musaenv.backends.triton as triton_backend

    pytest.importorskip("triton")
    monkeypatch.setattr(triton_backend, "cuda_device_present", lambda: False)
    info: BackendInfo = backends.resolve_backend("triton")
    assert (info.device, info.tier) == ("cpu", "interp")
