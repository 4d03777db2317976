"""S5: at::cpu::clamp_min calls the CPU kernel directly, past the dispatcher, so no profiler event is recorded."""

from adversarial import dirty


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return dirty.relu_cpu_direct(x)
