import torch
import torch.nn as nn


class Model(nn.Module):
    """Residual add followed by layer normalization: layer_norm(x + residual) (post-LN transformer style)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden_size)
        # Non-default scale and shift (seeded like every parameter): skipping them must fail.
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.ln(x + residual)


batch_size = 32
seq_len = 512
hidden_size = 4096


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden_size)
    residual = torch.randn(batch_size, seq_len, hidden_size) * 0.5 + 0.25
    return [x, residual]


def get_init_inputs():
    return [hidden_size]
