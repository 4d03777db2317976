"""Reference CPU solution for l2_linear_relu: one fused pass computes x @ W^T + b and applies ReLU in place.

W is transposed once per call so that the innermost loop streams a contiguous row of W^T into the output row.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <vector>

torch::Tensor linear_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
    TORCH_CHECK(weight.size(1) == K && bias.numel() == N, "weight (N, K) and bias (N) expected");
    const float* px = x.data_ptr<float>();
    const float* pw = weight.data_ptr<float>();
    const float* pb = bias.data_ptr<float>();
    std::vector<float> wt(K * N);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) wt[k * N + n] = pw[n * K + k];
    auto out = torch::empty({M, N}, x.options());
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i) {
        float* yrow = po + i * N;
        for (int64_t n = 0; n < N; ++n) yrow[n] = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float a = px[i * K + k];
            const float* wrow = wt.data() + k * N;
            for (int64_t n = 0; n < N; ++n) yrow[n] += a * wrow[n];
        }
        for (int64_t n = 0; n < N; ++n) {
            const float v = yrow[n] + pb[n];
            yrow[n] = v > 0.0f ? v : 0.0f;
        }
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l2_linear_relu",
    cpp_sources=CPP,
    functions=["linear_relu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        # Same layer as the reference so that seeded construction gives the same weights; only its tensors are read.
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.linear_relu_forward(x, self.fc.weight, self.fc.bias)
