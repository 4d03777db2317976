import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product y = A @ x with A of shape (M, K) and x of shape (K, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


M = 4096
K = 16384


def get_inputs():
    # A is scaled by 1/sqrt(K) so that y has unit variance whatever K is.
    A = torch.randn(M, K) / K**0.5
    x = torch.randn(K, 1)
    return [A, x]


def get_init_inputs():
    return []
