"""S9: the kernel leaves part of its fresh output buffer unwritten and passes when that memory happens to be zero."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_uninit(x)
