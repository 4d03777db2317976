"""S4: lazy partial work: torch does the op, the custom kernel only copies the result."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.copy_fwd(torch.relu(x))
