import torch
import torch_musa
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_musa, "expects a GPU tensor"
        return torch.softmax(x, dim=-1)


batch_size = 16
dim = 16384
device = "musa" if torch.musa.is_available() else "cpu"


def get_inputs():
    x = torch.randn(batch_size, dim).musa()
    noise = torch.randn(batch_size, dim, device="musa")
    other = torch.zeros(batch_size, device=torch.device("musa:0"))
    return [x + noise + other[:, None]]


def get_init_inputs():
    return []
