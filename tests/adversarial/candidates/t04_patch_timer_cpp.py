"""T4: the same clock patch made from C++ through pybind11, out of sight of a Python source scan."""

from adversarial import dirty
from adversarial import ext

dirty.patch_timer()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
