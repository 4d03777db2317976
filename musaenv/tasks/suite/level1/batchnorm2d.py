import torch
import torch.nn as nn


class Model(nn.Module):
    """2-D batch normalization in training mode: per-channel statistics over batch, height and width.

    The module is never put in eval mode, so the output uses the batch's own mean and biased variance
    (the running statistics are updated as a side effect but do not affect the output).
    """

    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        # Non-default scale and shift (seeded like every parameter): skipping them must fail.
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


batch_size = 64
num_features = 64
height = 128
width = 128


def get_inputs():
    x = torch.randn(batch_size, num_features, height, width) * 3.0 - 1.0
    return [x]


def get_init_inputs():
    return [num_features]
