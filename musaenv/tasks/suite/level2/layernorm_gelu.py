import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Layer normalization over the hidden dimension followed by exact GELU."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden_size)
        # Non-default scale and shift (seeded like every parameter): skipping them must fail.
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.ln(x))


batch_size = 32
seq_len = 512
hidden_size = 4096


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden_size) * 2.0 + 1.0
    return [x]


def get_init_inputs():
    return [hidden_size]
