"""T4: monkeypatch the clock (time.perf_counter_ns runs 100 times slower), so every timed call looks 100x faster."""

import time

from adversarial import ext

_real = time.perf_counter_ns
time.perf_counter_ns = lambda: _real() // 100


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
