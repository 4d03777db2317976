"""Hazard: the kernel dereferences a bad pointer."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.segfault(x)
