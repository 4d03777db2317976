"""A reference that keeps state between calls (as an RNN carrying its hidden state does): not verifiable call by call."""

import torch
import torch.nn as nn

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.zeros(1))

    def forward(self, x):
        out = torch.relu(x + self.offset)
        self.offset = self.offset + 1.0
        return out


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
