"""S12, middle: the kernel runs on a stale input for timed calls 1-3 of 5, honestly before and after (last call too).

Caught only if those calls are looked at: two timed calls drawn for a full recheck, the last one, and the rest
probed by output fingerprints picked after the run.
"""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.stale = None

    def forward(self, x):
        self.calls += 1
        if self.stale is None or self.stale.shape != x.shape:
            self.stale = x.clone()
        if 10 <= self.calls <= 12:  # after its trials, the runtime runs, 1 warm-up and timed call 0 (call 9)
            return ext.relu_fwd(self.stale)
        return ext.relu_fwd(x)
