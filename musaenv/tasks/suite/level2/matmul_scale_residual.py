import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, scaled by a constant, plus a residual input: (x @ W^T + b) * scale + residual."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale + residual


batch_size = 1024
in_features = 4096
out_features = 4096
scale = 0.5


def get_inputs():
    x = torch.randn(batch_size, in_features)
    residual = torch.randn(batch_size, out_features)
    return [x, residual]


def get_init_inputs():
    return [in_features, out_features, scale]
