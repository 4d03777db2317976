"""Hazard: starts a long-lived process in its own session (a detached daemon) at import."""

import subprocess

from adversarial import ext

subprocess.Popen(["sleep", "600"], start_new_session=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
