"""S5: at::relu under at::RecordFunctionGuard(false), which switches the profiler's callbacks off for the call."""

from adversarial import dirty


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return dirty.relu_no_record(x)
