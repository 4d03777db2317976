"""Reference CPU solution for l2_swiglu: both projections of a row are computed together, then silu(g) * u."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor swiglu_forward(torch::Tensor x, torch::Tensor w_gate, torch::Tensor w_up) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    w_gate = w_gate.contiguous();
    w_up = w_up.contiguous();
    const int64_t M = x.size(0), K = x.size(1), N = w_gate.size(0);
    TORCH_CHECK(w_gate.size(1) == K && w_up.size(0) == N && w_up.size(1) == K, "weights (N, K) expected");
    const float* px = x.data_ptr<float>();
    const float* pg = w_gate.data_ptr<float>();
    const float* pu = w_up.data_ptr<float>();
    std::vector<float> gt(K * N), ut(K * N);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
            gt[k * N + n] = pg[n * K + k];
            ut[k * N + n] = pu[n * K + k];
        }
    auto out = torch::empty({M, N}, x.options());
    float* po = out.data_ptr<float>();
    std::vector<float> g(N), u(N);
    for (int64_t i = 0; i < M; ++i) {
        std::fill(g.begin(), g.end(), 0.0f);
        std::fill(u.begin(), u.end(), 0.0f);
        for (int64_t k = 0; k < K; ++k) {
            const float a = px[i * K + k];
            const float* grow = gt.data() + k * N;
            const float* urow = ut.data() + k * N;
            for (int64_t n = 0; n < N; ++n) {
                g[n] += a * grow[n];
                u[n] += a * urow[n];
            }
        }
        float* yrow = po + i * N;
        for (int64_t n = 0; n < N; ++n) {
            const double gv = g[n];
            yrow[n] = static_cast<float>(gv / (1.0 + std::exp(-gv)) * u[n]);
        }
    }
    return out;
}
"""

ext = load_inline(
    name="musaenv_ref_l2_swiglu",
    cpp_sources=CPP,
    functions=["swiglu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        # Created in the reference's order so that seeded construction gives the same weights.
        self.gate = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up = nn.Linear(hidden_size, intermediate_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.swiglu_forward(x, self.gate.weight, self.up.weight)
