"""T3: the output is a deferred object that only computes when converted."""

from adversarial import ext


class Deferred:
    def __init__(self, x):
        self.x = x

    def __array__(self, dtype=None, copy=None):
        return ext.relu_fwd(self.x).numpy()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return Deferred(x)
