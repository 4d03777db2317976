"""S1: a copy of the reference Model, subclassed as ModelNew (the kernel runs on the side, unused)."""

from adversarial import ext


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


class ModelNew(Model):
    def forward(self, x):
        ext.relu_fwd(x[:1])
        return super().forward(x)
