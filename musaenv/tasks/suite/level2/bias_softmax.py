import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds a learnable per-column bias to a 2-D tensor, then takes the softmax of each row."""

    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x + self.bias, dim=1)


batch_size = 4096
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0
    return [x]


def get_init_inputs():
    return [dim]
