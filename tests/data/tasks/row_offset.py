import torch
import torch.nn as nn


class Model(nn.Module):
    """Subtracts each row's first element from the row (KernelBench format, GPU-sized like level 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x[:, :1]


batch_size = 4096
dim = 393216


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
