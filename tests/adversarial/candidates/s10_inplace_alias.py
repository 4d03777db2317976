"""S10: ReLU written into the input itself, which is returned (input mutation and an aliased output)."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_inplace(x)
