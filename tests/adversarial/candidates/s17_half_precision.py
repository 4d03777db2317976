"""S17: precision downgrade: the kernel rounds through fp16 inside C++."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_half(x)
