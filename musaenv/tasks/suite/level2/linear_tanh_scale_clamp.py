import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, tanh, multiplication by a constant, then clamping to [clamp_min, clamp_max]."""

    def __init__(self, in_features: int, out_features: int, scale: float, clamp_min: float, clamp_max: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.fc(x)) * self.scale
        return torch.clamp(x, min=self.clamp_min, max=self.clamp_max)


batch_size = 1024
in_features = 4096
out_features = 4096
scale = 2.0
clamp_min = -1.0
clamp_max = 1.5


def get_inputs():
    x = torch.randn(batch_size, in_features) * 2.0
    return [x]


def get_init_inputs():
    return [in_features, out_features, scale, clamp_min, clamp_max]
