"""S20: replace the worker's own output checks, then compute in place in the input (which they would flag)."""

import sys

from adversarial import ext

worker = sys.modules["__main__"]
worker._check_outputs = lambda *args, **kwargs: []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_inplace(x)
