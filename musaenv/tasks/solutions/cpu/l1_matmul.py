"""Reference CPU solution for l1_matmul: i-k-j loop order, so the innermost loop streams rows of B and C.

Each C[i, j] is a sequential fp32 sum over k, which the compiler vectorises across j.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "float32 inputs expected");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes (M, K) and (K, N) expected");
    A = A.contiguous();
    B = B.contiguous();
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::zeros({M, N}, A.options());
    const float* pa = A.data_ptr<float>();
    const float* pb = B.data_ptr<float>();
    float* pc = C.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i) {
        float* crow = pc + i * N;
        for (int64_t k = 0; k < K; ++k) {
            const float a = pa[i * K + k];
            const float* brow = pb + k * N;
            for (int64_t j = 0; j < N; ++j) crow[j] += a * brow[j];
        }
    }
    return C;
}
"""

ext = load_inline(
    name="musaenv_ref_l1_matmul",
    cpp_sources=CPP,
    functions=["matmul_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul_forward(A, B)
