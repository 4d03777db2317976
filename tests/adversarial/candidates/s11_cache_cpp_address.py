"""S11: the same cache, hidden in C++ (a static table keyed on the input's address)."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_by_address(x)
