import torch
import torch.nn as nn


class Model(nn.Module):
    """Dense matrix multiplication C = A @ B with A of shape (M, K) and B of shape (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 2048
K = 2048
N = 2048


def get_inputs():
    # A is scaled by 1/sqrt(K) so that C has unit variance whatever K is: fp32 summation-order
    # differences then stay well inside the tolerance.
    A = torch.randn(M, K) / K**0.5
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
