"""Shape derivation on small KernelBench-format programs (runs them in a real probe worker; no GPU needed)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from musaenv.errors import ConfigError
from musaenv.tasks.derive import ShapeConfig, derive_shapes, ladder
from musaenv.tasks.external import check_memory, derivation_for, derive_task, listing, load_suite
from musaenv.tasks.probe import ProbeClient
from musaenv.tasks.task import load_task_file

HEAD = "import torch\nimport torch.nn as nn\n\n"

ELEMENTWISE = (
    HEAD
    + """
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) - x[:, :1]

batch_size = 4096
dim = 393216

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""
)

GROUPED = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=groups)
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return self.norm(self.conv(x))

batch_size = 32
channels = 64
groups = 8
height, width = 128, 128

def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]

def get_init_inputs():
    return [channels, groups]
"""
)

ATTENTION = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self, embed, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]

batch_size = 64
seq_len = 256
embed = 512
heads = 8

def get_inputs():
    return [torch.rand(batch_size, seq_len, embed)]

def get_init_inputs():
    return [embed, heads]
"""
)

FIXED = (
    HEAD
    + """
class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    # sizes computed here, not passed to a constructor (musaenv.tasks.lift lifts those): nothing to vary
    return [torch.arange(64 * 1000, dtype=torch.float32).view(64, 1000)]

def get_init_inputs():
    return []
"""
)

EVEN_ONLY = (
    HEAD
    + """
class Model(nn.Module):
    def forward(self, x):
        if x.shape[1] % 2:
            raise ValueError("pairs of columns expected")
        return x.view(x.shape[0], -1, 2).sum(-1)

rows = 256
cols = 1024

def get_inputs():
    return [torch.rand(rows, cols)]

def get_init_inputs():
    return []
"""
)


# KernelBench's ResNet18 style: the image size is written inside a display that also names the batch constant,
# and training-mode BatchNorm rejects a batch of one at a 1 x 1 map.
IMAGE_DISPLAY = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

batch_size = 10
num_classes = 1000
input_shape = (batch_size, 3, 2048, 2048)

def get_inputs():
    return [torch.rand(input_shape)]

def get_init_inputs():
    return [num_classes]
"""
)


# Swin's style: construction reads a value (.item()), which the meta device cannot give; the image size is
# checked against the model's own, so only the batch can shrink.
READS_AT_INIT = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        rates = [x.item() for x in torch.linspace(0, 0.1, 3)]
        self.scale = float(sum(rates))
        self.proj = nn.Linear(64 * 64, 16)

    def forward(self, x):
        assert x.shape[-1] == 64, "image size does not match the model"
        return self.proj(x.flatten(1)) * self.scale

batch_size = 4096
image_size = 64

def get_inputs():
    return [torch.rand(batch_size, image_size, image_size)]

def get_init_inputs():
    return []
"""
)

# One common factor would take the channels below the fixed group count; they stay while the rest shrinks.
GROUPS_BOUND = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm = nn.GroupNorm(8, channels)

    def forward(self, x):
        return self.norm(x)

batch_size = 512
channels = 16
length = 4096

def get_inputs():
    return [torch.rand(batch_size, channels, length)]

def get_init_inputs():
    return [channels]
"""
)


# A roomy time budget: these tests check the rules, not this (shared, busy) machine's speed.
CFG = ShapeConfig(cpu_forward_ms=200.0)


@pytest.fixture(scope="module")
def client():
    with ProbeClient() as c:
        yield c


def _odd(v: int) -> bool:
    return v % 2 == 1


def test_ladder_prefers_odd_values():
    assert ladder(1024)[0] == 767 and all(v != 1024 for v in ladder(1024))
    assert ladder(8) == [7, 9] and ladder(3) == [] and ladder(2) == []


def test_gpu_sized_elementwise_file_gets_cpu_tier_within_budgets(client):
    cfg = CFG
    d = derive_shapes(ELEMENTWISE, cfg, client)
    assert d.warnings == []
    gpu, cpu = d.shapes["gpu"], d.shapes["cpu"]
    assert gpu[0] == {} and all(_odd(v) for v in gpu[1].values())
    assert len(cpu) == 2 and all(_odd(v) for v in cpu[1].values())
    # ratios kept (up to the rounding to the file's alignment): 4096 : 393216 = 1 : 96
    assert abs(cpu[0]["dim"] / cpu[0]["batch_size"] - 96) < 96 * 0.05
    for info in d.info["cpu"]:
        assert info["validated"] == "real" and info["forward_ms"] <= cfg.cpu_forward_ms
        assert info["input_bytes"] + info["output_bytes"] <= cfg.cpu_bytes
    assert d.info["gpu"][0]["input_bytes"] == 4096 * 393216 * 4  # known from the meta device, never allocated


def test_coupled_groups_found_by_validation(client):
    d = derive_shapes(GROUPED, CFG, client)
    for tier in ("cpu", "gpu"):
        shapes = d.shapes[tier]
        assert len(shapes) == 2, d.notes
        for s in shapes[1:]:
            channels, groups = s.get("channels", 64), s.get("groups", 8)
            assert channels % groups == 0 and channels != 64
            assert _odd(s["height"]) and _odd(s["width"]) and _odd(s["batch_size"])


def test_heads_divide_the_embedding(client):
    d = derive_shapes(ATTENTION, CFG, client)
    odd = d.shapes["cpu"][1]
    embed, heads = odd.get("embed", 512), odd.get("heads", 8)
    assert embed % heads == 0 and embed != d.shapes["cpu"][0].get("embed", 512)
    assert _odd(odd["seq_len"]) and _odd(odd["batch_size"])


def test_sizes_inside_get_inputs_give_one_shape_and_say_so(client):
    d = derive_shapes(FIXED, CFG, client)
    assert "single_shape" in d.warnings
    assert d.shapes["cpu"] == [{}] and d.shapes["gpu"] == [{}]
    assert any("get_inputs" in n for n in d.notes)


def test_reference_rejecting_odd_sizes_gets_the_least_even_factor(client):
    d = derive_shapes(EVEN_ONLY, CFG, client)
    odd = d.shapes["cpu"][1]
    assert _odd(odd["rows"])
    assert odd["cols"] % 2 == 0 and odd["cols"] % 4 != 0  # 2 x an odd number: what the program allows


def test_a_hanging_file_is_time_boxed(client, tmp_path: Path):
    hang = HEAD + "while True:\n    pass\n" + FIXED[len(HEAD) :]
    start = time.monotonic()
    d = derive_shapes(hang, ShapeConfig(check_timeout_s=2.0), client)
    assert time.monotonic() - start < 30
    assert "not_derived" in d.warnings and d.shapes == {"cpu": [{}], "gpu": [{}]}


def test_memory_guard_names_task_bytes_and_knob(client, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MUSAENV_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "level1" / "relu_big.py"
    f.parent.mkdir()
    f.write_text(ELEMENTWISE)
    task = derive_task(load_task_file(f), CFG, client)
    check_memory(task, "cpu", 16384, copies=21)  # the cpu tier fits
    with pytest.raises(ConfigError) as e:
        check_memory(task, "gpu", 16384, copies=2)
    msg = str(e.value)
    assert task.id in msg and "address_space_mb" in msg and f"{2 * 2 * 4096 * 393216 * 4:,}" in msg


def test_folder_is_derived_once_then_read_from_cache(client, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MUSAENV_CACHE_DIR", str(tmp_path / "cache"))
    for level, name, src in (("level1", "relu", ELEMENTWISE), ("level2", "fixed", FIXED)):
        (tmp_path / "kb" / level).mkdir(parents=True, exist_ok=True)
        (tmp_path / "kb" / level / f"{name}.py").write_text(src)
    tasks = load_suite(tmp_path / "kb", config=CFG)
    assert [t.id for t in tasks] == ["level1/relu", "level2/fixed"]
    assert tasks[1].warnings == ("single_shape",) and len(tasks[0].shapes["cpu"]) == 2
    start = time.monotonic()
    again = load_suite(tmp_path / "kb", levels=(1,), config=CFG)
    assert time.monotonic() - start < 2.0 and [t.id for t in again] == ["level1/relu"]
    assert again[0].shapes == tasks[0].shapes
    entry = listing(again[0])
    assert {"id", "level", "dtype", "shapes", "warnings"} <= set(entry)
    assert derivation_for(ELEMENTWISE, CFG).shapes["cpu"] == [dict(s) for s in tasks[0].shapes["cpu"]]


def test_env_samples_a_folder_by_level_with_seeded_resets(tmp_path: Path, monkeypatch):
    import gymnasium as gym

    import musaenv  # noqa: F401 - registers the env ids

    monkeypatch.setenv("MUSAENV_CACHE_DIR", str(tmp_path / "cache"))
    for level, name, src in (("level1", "a", FIXED), ("level1", "b", EVEN_ONLY), ("level2", "c", GROUPED)):
        (tmp_path / "kb" / level).mkdir(parents=True, exist_ok=True)
        (tmp_path / "kb" / level / f"{name}.py").write_text(src)
    env = gym.make("KernelGen-v0", tasks=str(tmp_path / "kb"), levels=(1,), backend="cpu", shape_config=CFG)
    try:
        seen = [env.reset(seed=s)[1] for s in (0, 1, 2, 3, 0)]
    finally:
        env.close()
    ids = [info["task_id"] for info in seen]
    assert set(ids) <= {"level1/a", "level1/b"} and ids[0] == ids[-1]  # same seed, same task
    for info in seen:
        assert info["task_warnings"] == (["single_shape"] if info["task_id"] == "level1/a" else [])


def test_image_size_inside_a_display_is_scaled_and_the_batch_stays_above_one(client):
    d = derive_shapes(IMAGE_DISPLAY, CFG, client)
    assert len(d.shapes["cpu"]) == 2, d.notes
    first, odd = d.shapes["cpu"]
    assert first["input_shape"][2] < 2048 and first["input_shape"][0] >= 2
    assert odd["input_shape"][2] % 2 == 1 and odd["input_shape"][2] != first["input_shape"][2]
    assert d.info["cpu"][0]["input_bytes"] <= CFG.cpu_bytes


def test_a_model_reading_values_at_construction_is_sized_and_its_fixed_image_kept(client):
    d = derive_shapes(READS_AT_INIT, CFG, client)
    assert "not_derived" not in d.warnings, d.notes
    assert len(d.shapes["cpu"]) == 2, d.notes
    for shape in d.shapes["cpu"]:
        assert shape.get("image_size", 64) == 64 and 2 <= shape["batch_size"] < 4096
    assert any("image_size kept at 64" in n for n in d.notes)


def test_a_size_bounded_by_a_fixed_constant_is_kept_while_the_others_shrink(client):
    d = derive_shapes(GROUPS_BOUND, CFG, client)
    first = d.shapes["cpu"][0]
    assert first.get("channels", 16) >= 8 and first["batch_size"] * first["length"] < 512 * 4096, d.notes
    assert d.info["cpu"][0]["input_bytes"] <= CFG.cpu_bytes
