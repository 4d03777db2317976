"""S12: a call counter in C++: honest for the correctness trials and warm-up, zeros once timing has started."""

from adversarial import ext

HONEST_CALLS = 8  # 5 trials + the runtime repeat and perturbed run + 1 warm-up


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_counted(x, HONEST_CALLS)
