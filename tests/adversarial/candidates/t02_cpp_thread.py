"""T2: the work is deferred to a detached C++ thread; forward returns before the output is written."""

from adversarial import dirty


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return dirty.relu_bg_thread(x)
