"""S20: replace the worker's own output checks, then compute in place in the input (which they would flag)."""

import sys

from adversarial import ext

# The worker runs as __main__ (fresh interpreter) or as musaenv.worker.candidate (forked): patch whichever it is.
for worker in list(sys.modules.values()):
    if hasattr(worker, "_check_outputs") and hasattr(worker, "run_candidate"):
        worker._check_outputs = lambda *args, **kwargs: []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_inplace(x)
