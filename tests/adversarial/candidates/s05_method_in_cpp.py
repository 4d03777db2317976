"""S5: library compute hidden as a tensor method inside C++ (x.clamp_min(0))."""

from adversarial import dirty


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return dirty.relu_method(x)
