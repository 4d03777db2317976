"""Reference CPU solution for l3_mlp: the three layers run back to back in C++ with ReLU fused into the first two."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <vector>

// y[M, N] = x[M, K] @ w[N, K]^T + b[N], optionally ReLU'd. w is transposed once so the inner loop is contiguous.
static void linear_rows(const float* x, const float* w, const float* b, float* y,
                        int64_t M, int64_t K, int64_t N, bool relu) {
    std::vector<float> wt(K * N);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) wt[k * N + n] = w[n * K + k];
    for (int64_t i = 0; i < M; ++i) {
        float* yrow = y + i * N;
        for (int64_t n = 0; n < N; ++n) yrow[n] = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float a = x[i * K + k];
            const float* wrow = wt.data() + k * N;
            for (int64_t n = 0; n < N; ++n) yrow[n] += a * wrow[n];
        }
        for (int64_t n = 0; n < N; ++n) {
            const float v = yrow[n] + b[n];
            yrow[n] = (relu && v < 0.0f) ? 0.0f : v;
        }
    }
}

torch::Tensor mlp3_forward(torch::Tensor x, torch::Tensor w1, torch::Tensor b1, torch::Tensor w2,
                           torch::Tensor b2, torch::Tensor w3, torch::Tensor b3) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    w1 = w1.contiguous(); b1 = b1.contiguous();
    w2 = w2.contiguous(); b2 = b2.contiguous();
    w3 = w3.contiguous(); b3 = b3.contiguous();
    const int64_t M = x.size(0), K = x.size(1), H1 = w1.size(0), H2 = w2.size(0), O = w3.size(0);
    TORCH_CHECK(w1.size(1) == K && w2.size(1) == H1 && w3.size(1) == H2, "layer sizes do not chain");
    std::vector<float> h1(M * H1), h2(M * H2);
    auto out = torch::empty({M, O}, x.options());
    linear_rows(x.data_ptr<float>(), w1.data_ptr<float>(), b1.data_ptr<float>(), h1.data(), M, K, H1, true);
    linear_rows(h1.data(), w2.data_ptr<float>(), b2.data_ptr<float>(), h2.data(), M, H1, H2, true);
    linear_rows(h2.data(), w3.data_ptr<float>(), b3.data_ptr<float>(), out.data_ptr<float>(), M, H2, O, false);
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l3_mlp",
    cpp_sources=CPP,
    functions=["mlp3_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        # Same layers in the same order as the reference, so seeded construction gives the same weights.
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.mlp3_forward(
            x, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias, self.fc3.weight, self.fc3.bias
        )
