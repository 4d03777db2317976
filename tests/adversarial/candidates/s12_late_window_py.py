"""S12, the widest window the fixed checks leave: a stale input for timed calls 10-18 of 20 (nearly half of them).

The two calls drawn for a full recheck come from the first ten and the last call is rechecked too, so this
window is what a call-counting kernel that knows the harness would fake; fingerprint probes among the 17
unchecked calls miss all nine ~1.5 % of the time with four (the default), ~21 % with two. With
``TimingConfig(reference="every")`` the eager reference is timed on the same inputs in the same run and every
timed call's fingerprint is checked.
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
        if 19 <= self.calls <= 27:  # after its trials, the runtime runs and 1 warm-up: timed call k is call 9 + k
            return ext.relu_fwd(self.stale)
        return ext.relu_fwd(x)
