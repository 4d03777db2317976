import torch
import torch.nn as nn


class Model(nn.Module):
    """ResNet basic block (stride 1, identity shortcut): relu(bn2(conv2(relu(bn1(conv1(x))))) + x).

    Batch norm runs in training mode (batch statistics), as the module is never put in eval mode.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        # Non-default scale and shift (seeded like every parameter): skipping them must fail.
        with torch.no_grad():
            for norm in (self.bn1, self.bn2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


batch_size = 32
channels = 64
height = 56
width = 56


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
