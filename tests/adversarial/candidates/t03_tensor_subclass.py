"""T3: the output is a torch.Tensor subclass (which could defer or fake its values)."""

from adversarial import ext


class LazyTensor(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x).as_subclass(LazyTensor)
