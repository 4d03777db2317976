import torch
import torch.nn as nn


class Model(nn.Module):
    """Elman RNN unrolled over time: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh); returns every h_t."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.i2h = nn.Linear(input_size, hidden_size)
        self.h2h = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        h = h0
        outputs = []
        for t in range(x.shape[0]):
            h = torch.tanh(self.i2h(x[t]) + self.h2h(h))
            outputs.append(h)
        return torch.stack(outputs, dim=0)


seq_len = 256
batch_size = 64
input_size = 1024
hidden_size = 1024


def get_inputs():
    x = torch.randn(seq_len, batch_size, input_size)
    h0 = torch.randn(batch_size, hidden_size)
    return [x, h0]


def get_init_inputs():
    return [input_size, hidden_size]
