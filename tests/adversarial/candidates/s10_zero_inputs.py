"""S10: zero the inputs in place (a reference computed later on the same tensors would return zeros), return zeros."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x.zero_()
        return ext.fill_const(x, 0.0)
