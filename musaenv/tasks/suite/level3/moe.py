import torch
import torch.nn as nn


class Model(nn.Module):
    """Soft mixture of experts: a linear gate's softmax weights mix the outputs of small ReLU MLP experts.

    out = sum_e softmax(x @ W_gate^T)_e * expert_e(x). Dense (soft) routing keeps the output a continuous
    function of the input, so fp32 rounding can never flip a routing decision.
    """

    def __init__(self, hidden_size: int, ffn_size: int, num_experts: int):
        super().__init__()
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden_size, ffn_size), nn.ReLU(), nn.Linear(ffn_size, hidden_size))
            for _ in range(num_experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.gate(x), dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + weights[:, e : e + 1] * expert(x)
        return out


num_tokens = 4096
hidden_size = 1024
ffn_size = 2048
num_experts = 8


def get_inputs():
    x = torch.randn(num_tokens, hidden_size)
    return [x]


def get_init_inputs():
    return [hidden_size, ffn_size, num_experts]
