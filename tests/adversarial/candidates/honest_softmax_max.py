"""Honest: softmax with the row max subtracted (fp32 accumulator, one thread): correct on scaled and offset inputs."""

from adversarial import numerics


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return numerics.softmax_max(x)
