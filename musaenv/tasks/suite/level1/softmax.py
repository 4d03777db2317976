import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension of a 2-D tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 16384


def get_inputs():
    # The +100 offset makes exp() of the raw values overflow fp32: a kernel must subtract the row max
    # (the result is shift-invariant, so the expected output stays well-conditioned).
    x = torch.randn(batch_size, dim) * 4.0 + 100.0
    return [x]


def get_init_inputs():
    return []
