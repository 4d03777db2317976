"""S5: the same unqualified ATen call under at::RecordFunctionGuard(false): out of sight of both layers."""

from adversarial import dirty


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return dirty.relu_adl_unrecorded(x)
