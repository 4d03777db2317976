"""S6/S7: an output that depends on the input, but not in the right way (a tiny multiple of it)."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.copy_fwd(x * 1e-9)
