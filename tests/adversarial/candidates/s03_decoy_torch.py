"""S3: the kernel is launched on dummy data; the output really comes from torch."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        ext.relu_fwd(torch.ones(8))
        return x.clamp(min=0)
