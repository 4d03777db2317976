"""Hazard: a fork storm at import; every child sleeps so that it would outlive the evaluation."""

import os
import time

from adversarial import ext

for _ in range(64):
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
