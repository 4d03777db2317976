"""S5: the "kernel" is at::relu called from C++ (library compute inside the extension)."""

from adversarial import dirty


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return dirty.relu_aten(x)
