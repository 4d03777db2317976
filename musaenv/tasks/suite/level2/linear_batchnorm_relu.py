import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, 1-D batch normalization in training mode (batch statistics), then ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        # Non-default scale and shift (seeded like every parameter): skipping them must fail.
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.fc(x)))


batch_size = 1024
in_features = 4096
out_features = 4096


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
