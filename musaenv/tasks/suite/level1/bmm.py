import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiplication: C[b] = A[b] @ B[b] for A (batch, M, K) and B (batch, K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 128
M = 256
K = 512
N = 512


def get_inputs():
    # A is scaled by 1/sqrt(K) so that C has unit variance whatever K is.
    A = torch.randn(batch_size, M, K) / K**0.5
    B = torch.randn(batch_size, K, N)
    return [A, B]


def get_init_inputs():
    return []
