import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x + 1), as two separate torch ops (two passes over memory, two outputs allocated)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + 1.0)


batch_size = 1024
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
