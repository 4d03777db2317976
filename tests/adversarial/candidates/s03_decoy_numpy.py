"""S3: the kernel runs on the real input, but the output is computed with numpy (no aten op to profile)."""

import numpy as np

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        ext.relu_fwd(x)  # decoy: its result is dropped
        return torch.from_numpy(np.maximum(x.numpy(), 0.0))
