"""S6: all-zeros output (made by the kernel) on a task whose true output is below the tolerance."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fill_const(x, 0.0)
