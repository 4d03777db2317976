import torch
import torch.nn as nn


class Model(nn.Module):
    """LeNet-style classifier: two (5x5 conv, ReLU, 2x2 max pool) stages, then Linear-ReLU-Linear."""

    def __init__(self, in_channels: int, num_classes: int, image_size: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.pool = nn.MaxPool2d(2, 2)
        side = ((image_size - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(32 * side * side, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        return self.fc2(x)


batch_size = 256
in_channels = 3
num_classes = 1000
image_size = 64


def get_inputs():
    x = torch.randn(batch_size, in_channels, image_size, image_size)
    return [x]


def get_init_inputs():
    return [in_channels, num_classes, image_size]
