"""Work moved between the draw of a timed call's inputs and its window, through a name the timing loop looks up
after the draw: ``torch.Tensor.fill_`` replaced, which the harness's cache flush calls with the call's inputs in
the caller's frame; it computes their ReLU and keeps it by address, and after three calls takes itself out again
(before the end of the timed calls, where every name is compared). Forward copies the kept answer through a
kernel while the clock runs. A heavy ReLU's speedup tripled this way (0.006 -> 0.018, ``correct``). Its static
form is refused (``monkeypatch``); with the static checks off, the draw watch, which compares per draw the names
the timing loop uses up to the window too (musaenv.worker.draw_reach), names it before the first timed draw.
"""

import sys

from adversarial import ext

_kept = {}
_fill = torch.Tensor.fill_
_left = [3]


def _fill_and_work(self, value):
    out = _fill(self, value)
    args = sys._getframe(1).f_locals.get("args")
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 2 and _left[0] > 0:
        _kept.clear()
        _kept[args[0].data_ptr()] = (args[0], ext.relu_fwd(args[0]))
        _left[0] -= 1
        if _left[0] == 0:
            del torch.Tensor.fill_
    return out


torch.Tensor.fill_ = _fill_and_work


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        hit = _kept.pop(x.data_ptr(), None)
        if hit is not None and hit[0] is x:
            return ext.copy_fwd(hit[1])
        return ext.relu_fwd(x)
