import torch
import torch.nn as nn


class Model(nn.Module):
    """Scale, then ReLU (a level-2 style fused chain), small enough for the CPU."""

    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale)


batch_size = 8
dim = 1024
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale]
