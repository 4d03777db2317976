"""Work moved between the draw of a timed call's inputs and its window, by the garbage collector: a cycle with a
finaliser is left as garbage after every call and the collector made to run at every allocation it tracks
(``gc.set_threshold(1, ...)``); the finaliser that runs after the harness's draw has returned (its stack holds
``_gated_args``, not the draw watch's checks) arms a profile hook, which takes the drawn inputs from the helper's
return, computes their ReLU, and takes itself out again before anything looks (it also leaves at the first call
into a draw watch check). Forward then copies the kept answer through a kernel while the clock runs. Escaped every
runtime check (speedup doubled, only a ``timing_work_outside`` warning) until the collector stayed off from each
draw until the parent's next word (musaenv.timing.timers.time_gated): now its finaliser never runs in that gap.
"""

import gc
import sys

from adversarial import ext

_kept = {}


def _hook(frame, event, arg):
    name = frame.f_code.co_name
    if name in ("check", "around", "_hooks"):
        sys.setprofile(None)
    elif event == "return" and name in ("_gated_args", "draw") and isinstance(arg, list) and arg:
        sys.setprofile(None)
        x = arg[0]
        if isinstance(x, torch.Tensor) and x.dim() == 2 and x.dtype == torch.float32:
            answer = ext.relu_fwd(x)
            _kept.clear()
            _kept[x.data_ptr()] = (x, answer)


class _Trigger:
    def __del__(self):
        names, frame = set(), sys._getframe(1)
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        if "_gated_args" in names and not names & {"check", "around"} and sys.getprofile() is None:
            sys.setprofile(_hook)
        else:
            _leave_garbage()


def _leave_garbage():
    trigger = _Trigger()
    trigger.me = trigger


gc.set_threshold(1, 100000, 100000)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        hit = _kept.pop(x.data_ptr(), None)
        _leave_garbage()
        if hit is not None and hit[0] is x:
            answer = hit[1]
            return ext.copy_fwd(answer)
        return ext.relu_fwd(x)
