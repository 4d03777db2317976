"""T6: writes a forged "result" frame straight into the worker's result pipe, found from its command line."""

import struct
import sys

from adversarial import ext

fd = int(sys.argv[sys.argv.index("--wfd") + 1])
frame = b'{"type": "result", "builds": [], "warnings": [], "_arrays": []}'
with open(fd, "wb", closefd=False) as pipe:
    pipe.write(struct.pack("!i", len(frame)) + frame)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fill_const(x, 0.0)
