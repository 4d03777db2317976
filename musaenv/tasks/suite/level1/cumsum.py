import torch
import torch.nn as nn


class Model(nn.Module):
    """Inclusive prefix sum (cumulative sum) along each row."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=1)


batch_size = 128
dim = 32768


def get_inputs():
    # Non-negative inputs keep the running sums growing, so fp32 scan-order differences stay relative
    # (a zero-mean input would make some partial sums cancel to near zero).
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
