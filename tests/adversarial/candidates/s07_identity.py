"""S7: identity passthrough (a fresh copy of the input, made by the kernel)."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.copy_fwd(x)
