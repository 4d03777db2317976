import torch
import torch.nn as nn


class Model(nn.Module):
    """VGG-style block: two (3x3 conv, batch norm in training mode, ReLU) stages, then 2x2 max pooling."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.pool = nn.MaxPool2d(2, 2)
        # Non-default scale and shift (seeded like every parameter): skipping them must fail.
        with torch.no_grad():
            for norm in (self.bn1, self.bn2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.pool(x)


batch_size = 32
in_channels = 64
out_channels = 128
height = 112
width = 112


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
