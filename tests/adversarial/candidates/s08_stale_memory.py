"""S8: no work, return uninitialised memory hoping it holds the freed reference output."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        ext.relu_fwd(x[:1])  # a token call so that a kernel "ran"
        return torch.empty_like(x)
