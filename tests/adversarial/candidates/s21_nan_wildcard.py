"""S21: NaN everywhere, in case the comparison treats NaN as a wildcard."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fill_const(x, float("nan"))
