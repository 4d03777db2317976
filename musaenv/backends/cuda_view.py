"""A view of CPU tensors as CUDA tensors, for CUDA-written Triton code run by Triton's CPU interpreter.

While :meth:`CudaView.active` is entered, tensors report ``is_cuda``, ``device.type == "cuda"`` and
``get_device() == 0`` while holding CPU memory; ``device="cuda"`` arguments, ``.cuda()`` and ``.to("cuda")`` stay
on the CPU; ``torch.cuda.is_available/device_count/current_device/synchronize`` answer as one idle GPU would. The
candidate worker (:mod:`musaenv.worker.triton_hook`) enters it around the candidate's own code only; the GPU
compile check (:mod:`musaenv.toolchains.triton_aot`) around loading and constructing the candidate. Nothing else in
``torch.cuda`` is emulated: it fails as on a CPU build of torch, and the worker reports that as "needs a GPU".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["CUDA_ANSWERS", "CudaView", "NeedsGpuError", "cuda_answers"]

_CUDA0 = torch.device("cuda", 0)
# Bound at import, before any candidate code: the identities the view and the classifier compare against.
# A property reaches the mode as its descriptor's ``__get__``, a new method-wrapper each time: keyed by descriptor.
_IS_CUDA, _IS_CPU, _DEVICE = torch.Tensor.is_cuda, torch.Tensor.is_cpu, torch.Tensor.device
_GET_DEVICE = torch.Tensor.get_device
_TO_CUDA = torch.Tensor.cuda
_TENSOR_TO = torch.Tensor.to
CUDA_ANSWERS: dict[str, Callable[..., Any]] = {
    "is_available": lambda: True,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "synchronize": lambda device=None: None,  # the interpreter runs each launch to its end
}


class NeedsGpuError(RuntimeError):
    """The candidate used something the CPU interpreter's view of a GPU does not emulate."""


def _is_cuda_name(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return isinstance(value, str) and (value == "cuda" or value.startswith("cuda:"))


def _host(value: Any, names: bool, host: torch.device) -> Any:
    """``value`` with a CUDA device (object always; string or index when ``names``) replaced by ``host``."""
    if isinstance(value, torch.device):
        return host if value.type == "cuda" else value
    if names and (_is_cuda_name(value) or (isinstance(value, int) and not isinstance(value, bool))):
        return host
    return value


class CudaView(TorchFunctionMode):
    """While entered: CPU tensors present themselves as tensors on ``cuda:0``, and CUDA placements stay on the CPU.

    Re-entrant: only the outermost entry pushes the mode and patches ``torch.cuda``.
    """

    def __init__(self, host: str = "cpu") -> None:
        super().__init__()
        self.host = torch.device(host)  # where "CUDA" tensors really are (the compile check keeps them on meta)
        self.depth = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        prop = getattr(func, "__self__", None) if getattr(func, "__name__", "") == "__get__" else None
        if prop is _IS_CUDA:
            return True
        if prop is _IS_CPU:
            return False
        if prop is _DEVICE:
            d = func(*args)
            return _CUDA0 if d.type == self.host.type else d
        if func is _GET_DEVICE:
            return 0
        if func is _TO_CUDA:
            return args[0]  # already "on the GPU": torch returns the tensor itself
        if "device" in kwargs:
            kwargs["device"] = _host(kwargs["device"], True, self.host)
        positional_names = func is _TENSOR_TO  # x.to("cuda"), x.to(0) is not a dtype: only .to takes names there
        args = tuple(_host(a, positional_names and isinstance(a, str), self.host) for a in args)
        return func(*args, **kwargs)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Enter the view (the mode and the ``torch.cuda`` answers) for the duration of the block."""
        if self.depth:
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
            return
        self.depth = 1
        try:
            with cuda_answers(), self:
                yield
        finally:
            self.depth = 0


@contextmanager
def cuda_answers() -> Iterator[None]:
    """``torch.cuda``'s :data:`CUDA_ANSWERS` in place for the block (the originals come back after it)."""
    saved = {name: getattr(torch.cuda, name) for name in CUDA_ANSWERS}
    for name, fn in CUDA_ANSWERS.items():
        setattr(torch.cuda, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():  # the harness's own identities (watched as timers) come back
            setattr(torch.cuda, name, fn)
