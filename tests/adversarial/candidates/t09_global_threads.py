"""T9/S17: changes process-wide settings (intra-op threads, matmul precision) at import."""

from adversarial import ext

torch.set_num_threads(4)
torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
