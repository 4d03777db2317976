"""Worker side of the triton backend: the candidate's launches are counted, and CUDA-written code runs on the CPU.

Installed in the candidate worker before the candidate is imported (and before the sandbox):

* **Launches counted.** ``JITFunction.run`` (the GPU JIT) and ``InterpretedFunction.run`` (``TRITON_INTERPRET=1``)
  are wrapped so that every launch of a kernel defined in the candidate's own file that returned adds one to the
  same :class:`~musaenv.worker.loader_hook.KernelCalls` that counts extension calls, with the launch's tensor
  arguments handed to the call hook. ``no_kernel_call`` and the overwrite probe (``output_not_from_kernel``) then
  judge Triton kernels as they judge compiled extensions: a forward that launches none of them (a PyTorch fallback
  taken because the inputs are not on a GPU) is refused under every policy.
* **Judged on the CPU as on a GPU.** On the CPU interpreter, :class:`CudaView` is in force while the candidate's
  module loads, while ``ModelNew`` is constructed and during each of its calls, and nowhere else (never in the
  harness, never in the reference's worker): tensors report ``is_cuda``, ``device.type == "cuda"`` and
  ``get_device() == 0`` while holding CPU memory; ``device="cuda"`` arguments, ``.cuda()`` and ``.to("cuda")``
  stay on the CPU; ``torch.cuda.is_available/device_count/current_device/synchronize`` answer as one idle GPU
  would; ``triton.runtime.driver.active`` answers the torch device and the current device, and its benchmarker
  lets ``@triton.autotune`` take its first config. Each launch runs with the view off, so the interpreter and the
  call hook see plain CPU tensors.
* **Needs a GPU.** What the view does not emulate (other ``torch.cuda`` calls, streams, events, device
  properties, the driver's other methods, bfloat16 arithmetic in the interpreter) fails; :func:`needs_gpu_reason`
  recognises those failures by the code that raised them (not by their text, which a candidate could copy) so the
  verdict is an unscored ``needs_gpu`` with the reason, not ``runtime_error``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType
from typing import Any

import torch

from musaenv.backends.cuda_view import CUDA_ANSWERS, CudaView, NeedsGpuError
from musaenv.isolation.messages import CandidateRequest
from musaenv.worker.loader_hook import BuildState, KernelCalls

__all__ = ["TritonRun", "install_triton_hook", "needs_gpu_reason", "worker_hook"]

_CUDA0 = torch.device("cuda", 0)
_LAZY_INIT: CodeType = torch.cuda._lazy_init.__code__  # bound at import, before any candidate code

log = logging.getLogger(__name__)


class _InterpreterDriver:
    """``triton.runtime.driver.active`` on the CPU interpreter, where Triton finds no GPU driver."""

    def get_active_torch_device(self) -> torch.device:
        return _CUDA0

    def get_current_device(self) -> int:
        return 0

    def get_benchmarker(self) -> Callable[..., Any]:
        def bench(fn: Any, *args: Any, quantiles: Any = None, **kwargs: Any) -> Any:
            # Equal times: @triton.autotune keeps its first config (the interpreter's time says nothing of a GPU's).
            return [1.0] * len(quantiles) if quantiles else 1.0

        return bench

    def __getattr__(self, name: str) -> Any:
        raise NeedsGpuError(f"triton.runtime.driver.active.{name} needs a GPU driver; the CPU interpreter has none")


def _counted_run(
    run: Callable[..., Any], calls: KernelCalls, mine: Callable[[Any], bool], plain: bool
) -> Callable[..., Any]:
    @functools.wraps(run)
    def counted_run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        if warmup or not mine(self):
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        # Under the CUDA view, the interpreter and the call hook see plain CPU tensors (the view is off here).
        with torch._C.DisableTorchFunction() if plain else contextlib.nullcontext():
            with calls.around():
                result = run(self, *args, grid=grid, warmup=warmup, **kwargs)
            calls.count += 1
            if calls.hook is not None:
                calls.hook(calls.count, args, kwargs, None)
        return result

    counted_run.__musaenv_counted__ = True  # type: ignore[attr-defined]
    return counted_run


class TritonRun:
    """The triton backend's state in one candidate worker (see the module docstring).

    Attributes:
        view: The CUDA view on the CPU interpreter; ``None`` on a GPU.
    """

    def __init__(self, view: CudaView | None) -> None:
        self.view = view

    @contextmanager
    def loading(self) -> Iterator[None]:
        """The candidate's module runs its top-level code under the view (``DEVICE = "cuda"`` and the like)."""
        if self.view is None:
            yield
            return
        with self.view.active():
            yield

    def model_class(self, cls: Any) -> Any:
        """``cls`` itself on a GPU; on the CPU, a subclass whose construction and calls run under the view."""
        view = self.view
        if view is None or not isinstance(cls, type):
            return cls

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            with view.active():
                cls.__init__(self, *args, **kwargs)  # type: ignore[misc]

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            with view.active():
                return cls.__call__(self, *args, **kwargs)

        attrs = {"__init__": __init__, "__call__": __call__, "__module__": cls.__module__}
        return type(cls.__name__, (cls,), {**attrs, "__qualname__": cls.__qualname__})


def install_triton_hook(calls: KernelCalls, device: str, candidate_file: str) -> TritonRun:
    """Count the candidate's launches; on ``device == "cpu"`` also install the interpreter's guards and the view.

    Args:
        calls: The loader hook's counter.
        device: The evaluation device (``cpu`` means Triton's interpreter).
        candidate_file: The file name the candidate's module is compiled under: only kernels defined there count.
    """
    from triton.runtime import jit

    def mine(fn: Any) -> bool:
        code = getattr(getattr(fn, "fn", None), "__code__", None)
        return code is not None and code.co_filename == candidate_file

    classes: list[Any] = [jit.JITFunction]
    if device == "cpu":
        from triton.runtime import interpreter

        from musaenv.backends.triton_interp import install_interpreter_guards

        install_interpreter_guards()
        classes.append(interpreter.InterpretedFunction)
    for cls in classes:
        if not getattr(cls.run, "__musaenv_counted__", False):
            cls.run = _counted_run(cls.run, calls, mine, plain=device == "cpu")
    if device != "cpu":
        return TritonRun(None)
    from triton.runtime.driver import driver

    driver.set_active(_InterpreterDriver())
    return TritonRun(CudaView())


def _driver_codes() -> tuple[CodeType, ...]:
    try:
        from triton.runtime import driver
    except ImportError:
        return ()
    fn = getattr(driver, "_create_driver", None)
    return (fn.__code__,) if fn is not None else ()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack.extend(c for c in (e.__cause__, e.__context__) if c is not None)


def needs_gpu_reason(exc: BaseException) -> str | None:
    """Why ``exc`` (or an exception it was raised from) is the CPU interpreter's limit, not the candidate's fault.

    Recognised by type (:class:`NeedsGpuError`, the bf16 guard's error) or by the code that raised it (torch's
    ``torch.cuda._lazy_init``, Triton's driver lookup); ``None`` for anything else.
    """
    from musaenv.backends.triton_interp import TritonInterpreterLimitError

    driver_codes = _driver_codes()
    for e in _chain(exc):
        if isinstance(e, (NeedsGpuError, TritonInterpreterLimitError)):
            return str(e)
        tb, caller = e.__traceback__, "a torch.cuda function"
        while tb is not None:
            code = tb.tb_frame.f_code
            if code is _LAZY_INIT:
                return f"torch.cuda.{caller} needs a CUDA device; the CPU interpreter emulates only " + ", ".join(
                    f"torch.cuda.{n}" for n in CUDA_ANSWERS
                )
            if code in driver_codes:
                return "Triton's GPU driver was asked for (triton.runtime.driver); the CPU interpreter has none"
            caller = code.co_name
            tb = tb.tb_next
    return None


def worker_hook(state: BuildState, req: CandidateRequest) -> TritonRun:
    """The triton backend's worker hook (its record names it): launches counted; on the CPU, the interpreter judged
    as on a GPU."""
    return install_triton_hook(state.calls, req.device, str(Path(req.workdir) / "candidate.py"))
