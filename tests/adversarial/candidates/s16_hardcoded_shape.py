"""S16: shape specialisation: blocks of 1024 with no tail, right only when the size is a multiple of 1024."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_blocked(x)
