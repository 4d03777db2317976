import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """1-D convolution ('same' padding), exact GELU, then the mean over the length dimension."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv(x))
        return torch.mean(x, dim=2)


batch_size = 32
in_channels = 64
out_channels = 128
length = 4096
kernel_size = 5


def get_inputs():
    x = torch.randn(batch_size, in_channels, length)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
