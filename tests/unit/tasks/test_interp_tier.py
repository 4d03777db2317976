"""The interp tier: shapes Triton's CPU interpreter is judged at (derived in a real probe worker; no GPU needed)."""

from __future__ import annotations

import pytest

from musaenv.backends import BackendInfo
from musaenv.config import EvalConfig
from musaenv.errors import ConfigError
from musaenv.evaluator.plan import interpreter_shapes
from musaenv.tasks.derive import ShapeConfig, derive_shapes
from musaenv.tasks.probe import ProbeClient
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
    for key in ("batch_size", "dim"):
        assert interp[0][key] <= cpu[0][key]
    # large enough to exercise masking and tiling: several rows, rows of more than one 1,024-element block, and an
    # odd shape that is a multiple of no power-of-two block size
    assert all(s["batch_size"] >= 4 and s["dim"] > 1024 for s in interp)
    assert interp[1]["batch_size"] % 2 == 1 and interp[1]["dim"] % 2 == 1
    # larger than half the budget: the largest accepted sizes, not the smallest
    assert _bytes(d.info["interp"][0]) > CFG.interp_bytes // 4


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


def test_triton_on_the_cpu_draws_the_interp_tier(monkeypatch: pytest.MonkeyPatch):
    import musaenv.backends as backends
    import musaenv.backends.triton as triton_backend

    pytest.importorskip("triton")
    monkeypatch.setattr(triton_backend, "cuda_device_present", lambda: False)
    info: BackendInfo = backends.resolve_backend("triton")
    assert (info.device, info.tier) == ("cpu", "interp")
