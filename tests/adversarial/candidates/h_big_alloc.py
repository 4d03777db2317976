"""Hazard: the kernel allocates and touches 64 GiB."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.big_alloc(x)
