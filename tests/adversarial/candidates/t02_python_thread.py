"""T2: the kernel runs on a Python background thread that fills the returned buffer after forward returns."""

import threading

from adversarial import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)

        def work():
            out.copy_(ext.relu_fwd(x))
            threading.Event().wait(0.3)

        threading.Thread(target=work, daemon=True).start()
        return out
