import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear layer, division by a constant, then exact GELU: gelu((x @ W^T + b) / divisor)."""

    def __init__(self, in_features: int, out_features: int, divisor: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        x = x / self.divisor
        return F.gelu(x)


batch_size = 1024
in_features = 4096
out_features = 4096
divisor = 0.25


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, divisor]
