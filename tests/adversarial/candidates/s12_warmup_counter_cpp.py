"""S12: a call counter in C++: honest for the correctness trials and warm-up, zeros once timing has started."""

from adversarial import ext

HONEST_CALLS = 10  # 5 trials + the runtime repeat, perturbed run and rewrite run (2 calls) + 1 warm-up


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_counted(x, HONEST_CALLS)
