"""S6: a constant output near the mean of the true output, on a task whose output is below the tolerance."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fill_const(x, 4e-7)
