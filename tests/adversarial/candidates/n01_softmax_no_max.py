"""N1: softmax without the row max subtracted: right on randn, NaN once a value passes 88.7 (exp overflows)."""

from adversarial import numerics


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return numerics.softmax_no_max(x)
