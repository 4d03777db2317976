"""S14 / hazard: writes into musaenv's build cache (where later candidates' extensions are loaded from)."""

from adversarial import ext

with open("__CACHE_PATH__", "w") as f:
    f.write("poisoned")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
