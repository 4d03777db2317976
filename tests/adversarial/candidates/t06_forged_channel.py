"""T6: writes a forged "result" frame straight into the worker's result pipe (the only write-only pipe it holds)."""

import os
import struct

from adversarial import ext


def _result_pipes():
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            flags = open(f"/proc/self/fdinfo/{name}").read().split("flags:")[1].split()[0]
        except (OSError, IndexError):
            continue
        if target.startswith("pipe:") and int(flags, 8) & 3 == os.O_WRONLY:
            yield int(name)


frame = b'{"type": "result", "builds": [], "warnings": [], "_arrays": []}'
for fd in _result_pipes():
    os.write(fd, struct.pack("<Q", len(frame)) + frame)  # the channel's framing: 8-byte length, then JSON


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.fill_const(x, 0.0)
