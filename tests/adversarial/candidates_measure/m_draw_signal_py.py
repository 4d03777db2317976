"""Work moved between the draw of a timed call's inputs and its window by a signal: a Python ``SIGALRM`` handler
on a 0.2 ms interval timer looks up the timing loop's frame, and when it holds freshly drawn inputs (the cache
flush that follows the draw takes milliseconds, so a tick lands there) computes their ReLU and keeps it by address;
forward copies the kept answer through a kernel while the clock runs. Its static form is refused (``signal``
imported); with the static checks off, the draw watch's comparison of the Python-level signal handlers with its
snapshot names it before the first timed draw.
"""

import signal

from adversarial import ext

_kept = {}
_busy = [False]


def _on_tick(signum, frame):
    if _busy[0]:
        return
    while frame is not None and frame.f_code.co_name != "time_gated":
        frame = frame.f_back
    args = frame.f_locals.get("args") if frame is not None else None
    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 2 or args[0].data_ptr() in _kept:
        return
    _busy[0] = True
    _kept.clear()
    _kept[args[0].data_ptr()] = (args[0], ext.relu_fwd(args[0]))
    _busy[0] = False


signal.signal(signal.SIGALRM, _on_tick)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _busy[0] = True
        hit = _kept.pop(x.data_ptr(), None)
        out = ext.copy_fwd(hit[1]) if hit is not None and hit[0] is x else ext.relu_fwd(x)
        _busy[0] = False
        return out
