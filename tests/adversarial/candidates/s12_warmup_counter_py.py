"""S12: a Python call counter: compute while the calls may be checked, then replay the last output."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls <= 10 or self.last is None or self.last.shape != x.shape:
            self.last = ext.relu_fwd(x)
        return self.last.clone()
