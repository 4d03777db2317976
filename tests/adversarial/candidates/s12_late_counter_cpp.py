"""S12, late: honest through the trials, the warm-up and the first three timed calls, zeros from then on.

With 5 timed calls and 2 of them drawn for the recheck, a drawn pair missed both late calls 3 times in 10; the
last timed call is now always rechecked.
"""

from adversarial import ext

HONEST_CALLS = 13  # 5 trials + the runtime repeat, perturbed run and rewrite run (2) + 1 warm-up + 3 timed


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_counted(x, HONEST_CALLS)
