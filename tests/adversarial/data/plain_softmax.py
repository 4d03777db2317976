"""Softmax over the last dimension of plain randn (l1_softmax offsets its own inputs by 100): without stress
trials, a softmax that never subtracts the row max passes every trial here."""

import torch
import torch.nn as nn

batch_size = 64
dim = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
