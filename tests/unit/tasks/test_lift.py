"""Size literals written inside get_inputs become derivation variables (the rewrite, then derivation in a real probe
worker): an image of 224 x 224 written in the call shrinks at the interp tier; a width the module fixes does not."""

from __future__ import annotations

import pytest

from musaenv.tasks.derive import ShapeConfig, derive_shapes
from musaenv.tasks.external import derive_task
from musaenv.tasks.lift import lift_sizes
from musaenv.tasks.probe import ProbeClient
from musaenv.tasks.task import Task

# KernelBench level 1 problem 50's layout (an AlexNet first layer); the batch is 16 rather than 256 to keep the
# probes quick, so the cpu tier (9.6 MB of inputs) already shrinks the image only through the lifted name.
CONV = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, num_classes=1000):
        super(Model, self).__init__()
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=96, kernel_size=11, stride=4, padding=2)

    def forward(self, x):
        return self.conv1(x)

# Test code
batch_size = 16
num_classes = 1000

def get_inputs():
    return [torch.rand(batch_size, 3, 224, 224)]

def get_init_inputs():
    return [num_classes]
"""

# The 1024 features are written in __init__ as well: get_inputs' 1024 must match them and stays as written.
FIXED = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc(x)

batch_size = 8192

def get_inputs():
    return [torch.rand(batch_size, 1024)]

def get_init_inputs():
    return []
"""

CFG = ShapeConfig(cpu_forward_ms=200.0)  # roomy: the rules are checked, not this busy machine's speed


@pytest.fixture(scope="module")
def client():
    with ProbeClient() as c:
        yield c


def test_the_rewrite_names_each_size_once_and_keeps_every_other_byte():
    lifted = lift_sizes(CONV)
    assert lifted.names == {"dim_1": 224}  # equal literals share a name: the square image stays square
    assert "torch.rand(batch_size, 3, dim_1, dim_1)" in lifted.source  # 3 channels: small, left as written
    assert "dim_1 = 224\n\n\ndef get_inputs():" in lifted.source
    # undoing the two edits gives the file back byte for byte
    undone = lifted.source.replace("dim_1 = 224\n\n\n", "", 1).replace("dim_1", "224")
    assert undone == CONV


def test_size_positions_of_each_constructor_and_what_is_not_a_size():
    src = (
        "import torch\ndim_1 = 2\n"
        "def get_inputs():\n"
        "    n = 4096\n"
        "    return [torch.randint(0, 1000, (4096,)), torch.randn(size=[4096, 512]), torch.zeros((8, 8)),\n"
        "            torch.ones(n, 2048).view(2048, n), torch.empty(64, dtype=torch.float16), torch.full((96,), 1.0)]\n"
    )
    lifted = lift_sizes(src)
    # randint's bound (1000), small sizes (8), view's arguments, torch.full and the local n are not lifted;
    # dim_1 is taken by the program, so numbering starts at dim_2
    assert lifted.names == {"dim_2": 4096, "dim_3": 512, "dim_4": 2048, "dim_5": 64}
    assert "torch.randint(0, 1000, (dim_2,))" in lifted.source and "torch.randn(size=[dim_2, dim_3])" in lifted.source
    assert "torch.ones(n, dim_4).view(2048, n)" in lifted.source and "torch.full((96,), 1.0)" in lifted.source
    assert "n = 4096" in lifted.source
    kept = lift_sizes(src, keep=[512])
    assert kept.names == {"dim_2": 512} and "torch.randint(0, 1000, (4096,))" in kept.source


def test_a_program_without_size_literals_is_returned_as_is():
    src = "import torch\nn = 4096\ndef get_inputs():\n    return [torch.rand(n, 3)]\n"
    assert lift_sizes(src).source == src and lift_sizes(src).names == {}
    assert lift_sizes("x = 1\n").source == "x = 1\n"


def test_a_conv_image_written_in_get_inputs_shrinks_at_the_interp_tier(client):
    d = derive_shapes(CONV, CFG, client)
    assert d.source is not None and d.source == lift_sizes(CONV).source
    assert any("224 as dim_1" in n for n in d.notes), d.notes
    interp = d.shapes["interp"]
    assert all(int(i["input_bytes"]) + int(i["output_bytes"]) <= CFG.interp_bytes for i in d.info["interp"])
    first = interp[0]
    # before lifting only the batch could shrink (224 x 224 at any batch is 1.8 MB a call): now the image does too,
    # within the interpreter's FLOPs, while the batch is held at 2, and the 3 channels stay
    assert 11 <= first["dim_1"] < 224 and first["batch_size"] == 2
    assert all(int(i["flops"]) <= CFG.interp_flops for i in d.info["interp"]), d.info["interp"]
    assert "in_channels=3" in d.source and len(interp) == 2 and interp[1]["dim_1"] % 2 == 1
    # the reference runs at the chosen shapes, and so does the program as shown (its constants rewritten)
    for shape in interp:
        assert client.check(d.source, shape, real=True, limit_s=30.0, repeats=1)["ok"]
    task = Task(id="conv", level=1, source=d.source)
    shown = task.render_source(first)
    assert f"dim_1 = {first['dim_1']}\n" in shown and client.check(shown, {}, real=True, limit_s=30.0)["ok"]


def test_a_size_the_module_requires_is_not_lifted(client):
    d = derive_shapes(FIXED, CFG, client)
    assert d.source is None  # the program is the file as written
    assert any(n.startswith("get_inputs: 1024 kept as written") for n in d.notes), d.notes
    for tier in ("cpu", "interp"):
        assert all(set(s) <= {"batch_size"} for s in d.shapes[tier])


def test_a_derived_task_carries_the_lifted_program(client, tmp_path, monkeypatch):
    monkeypatch.setenv("MUSAENV_CACHE_DIR", str(tmp_path / "cache"))
    task = derive_task(Task(id="conv", level=1, source=CONV), CFG, client)
    assert task.source == lift_sizes(CONV).source and "dim_1" in task.shapes["interp"][0]
    again = derive_task(Task(id="conv", level=1, source=CONV), CFG, client)  # from the cache
    assert again.source == task.source and again.shapes == task.shapes


def test_a_file_that_does_not_load_is_derived_as_written(client):
    broken = CONV.replace("import torch.nn as nn\n", "import torch.nn as nn\nraise RuntimeError('broken')\n")
    d = derive_shapes(broken, CFG, client)
    assert d.source is None and "not_derived" in d.warnings
    assert any(n.startswith("get_inputs: 224 kept as written (load") for n in d.notes), d.notes
