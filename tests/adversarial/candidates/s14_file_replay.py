"""S14 / hazard: writes its outputs to a file outside its private directory, for a later process to replay."""

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = ext.relu_fwd(x)
        with open("__PWNED_PATH__", "wb") as f:
            f.write(out.numpy().tobytes())
        return out
