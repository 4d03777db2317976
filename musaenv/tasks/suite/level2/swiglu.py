import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU gate: silu(x @ W_gate^T) * (x @ W_up^T), two bias-free projections (LLaMA-style FFN input)."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up = nn.Linear(hidden_size, intermediate_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate(x)) * self.up(x)


batch_size = 2048
hidden_size = 2048
intermediate_size = 5632


def get_inputs():
    x = torch.randn(batch_size, hidden_size)
    return [x]


def get_init_inputs():
    return [hidden_size, intermediate_size]
