"""Hazard / S14 / S23: opens a TCP connection (to exfiltrate, fetch answers or pip install) at import."""

import socket

from adversarial import ext

socket.create_connection(("127.0.0.1", __PORT__), timeout=5).sendall(b"hello from the candidate")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
