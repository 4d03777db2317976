"""Slowing the other side: a correct ReLU whose extension's first call starts a helper thread (``std::async``, which
the static checks allow as honest parallelism) that is never joined and sweeps a 64 MB buffer until the worker ends.
Paired timing interleaves the reference's calls with the candidate's on the same timing core, so the helper runs
in the reference's windows too, evicting its caches and competing for memory bandwidth: the reference reads slower,
the speedup higher, while each of the candidate's own calls stays honest.
"""

from adversarial import base

SWEEP_CPP = r"""
#include <torch/extension.h>
#include <future>
#include <vector>

static void sweep() {
    std::vector<float> big(16 << 20);
    for (unsigned long i = 0;; ++i) big[(i * 4099) % big.size()] += 1.0f;
}

torch::Tensor relu_sweeping(torch::Tensor x) {
    static auto helper = std::async(std::launch::async, sweep);  // started by the first call, never joined
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] > 0.0f ? a[i] : 0.0f;
    return y;
}
"""

ext = load_inline(
    name="musaenv_adv_slow_reference", cpp_sources=SWEEP_CPP, functions=["relu_sweeping"], extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_sweeping(x)
