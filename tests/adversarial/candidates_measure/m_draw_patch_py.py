"""Work moved into the harness's draw of each timed call's inputs: ``torch.randn`` is replaced in torch's namespace
by a function that draws as before and also computes the ReLU of what it drew, kept by address; forward then only
copies the kept answer (through a kernel, so the kernel-call checks stay fed) while the clock runs. Its static form
is refused (``monkeypatch``); with the static checks off, the draw's before/after check of torch's namespace in the
worker (musaenv.verification.draw_watch) names the replaced function.
"""

from adversarial import ext

_kept = {}
_draw = torch.randn


def _draw_and_work(*args, **kwargs):
    x = _draw(*args, **kwargs)
    if x.dim() == 2 and x.dtype == torch.float32:
        if len(_kept) > 64:
            _kept.clear()
        _kept[x.data_ptr()] = (x, ext.relu_fwd(x))
    return x


torch.randn = _draw_and_work


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        hit = _kept.pop(x.data_ptr(), None)
        if hit is not None and hit[0].shape == x.shape:
            return ext.copy_fwd(hit[1])
        return ext.relu_fwd(x)
