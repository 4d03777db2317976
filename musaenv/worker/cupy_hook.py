"""Worker side of the CuPy candidate format (backend ``cupy``): kernels checked when built, counted when launched.

Installed before the candidate is imported (and before the sandbox), it replaces ``cupy.RawKernel`` and
``cupy.RawModule`` by subclasses that

* compile each source when it is constructed, so a kernel that does not compile is the candidate's
  ``compile_error`` with NVRTC's log, recorded as a build like a ``load_inline`` one. On a GPU through CuPy's own
  ``compile()``; without one (compile-only) through NVRTC directly (:mod:`musaenv.toolchains.cupy_nvrtc`), since
  CuPy's compile path asks the driver for the device first;
* launch every kernel on torch's current stream (a candidate may not choose streams: the static checks refuse
  CuPy's stream API), so the harness's timing and synchronisation cover the work;
* count every launch that returned in the same :class:`~musaenv.worker.loader_hook.KernelCalls` the extension
  wrappers count, with the launch's tensor arguments handed to the call hook, so ``no_kernel_call`` and the
  overwrite probe (``output_not_from_kernel``) judge CuPy kernels like compiled extensions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from musaenv.isolation.messages import CandidateRequest
from musaenv.types import BuildRecord
from musaenv.worker.failures import format_exc
from musaenv.worker.loader_hook import BuildFailedError, BuildState, WorkerHookError

__all__ = ["COMPILE_ONLY_ARCH", "install_cupy_hook", "worker_hook"]

#: Architecture of compile-only checks (Hopper, as the Triton compile check): NVRTC needs one without a device.
COMPILE_ONLY_ARCH = 90


class _Launcher:
    """Launch on torch's current stream, then count the call (a launch that raised produced nothing)."""

    def __init__(self, state: BuildState, cupy: Any) -> None:
        self.state, self.cupy = state, cupy
        self.streams: dict[tuple[int, int], Any] = {}

    @contextmanager
    def _torch_stream(self) -> Iterator[None]:
        s = torch.cuda.current_stream()
        key = (int(s.cuda_stream), int(s.device.index or 0))
        ext = self.streams.get(key)
        if ext is None:  # CuPy 14 takes torch's stream by the CUDA stream protocol (ExternalStream is deprecated)
            from_external = getattr(self.cupy.cuda.Stream, "from_external", None)
            ext = from_external(s) if from_external is not None else self.cupy.cuda.ExternalStream(*key)
            self.streams[key] = ext
        with ext:
            yield

    def _as_torch(self, a: Any) -> Any:
        return torch.from_dlpack(a) if isinstance(a, self.cupy.ndarray) else a

    def __call__(self, launch: Callable[..., Any], grid: Any, block: Any, args: Sequence[Any], kw: Any) -> Any:
        # A parameter requires grad, and torch refuses __cuda_array_interface__ then: the kernel reads its memory.
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        calls = self.state.calls
        with self._torch_stream(), calls.around():
            result = launch(grid, block, args, **kw)
        calls.count += 1
        if calls.hook is not None:
            calls.hook(calls.count, tuple(self._as_torch(a) for a in args), {}, None)
        return result


class _CompiledOnlyKernel:
    """Compile-only stand-in for ``RawModule.get_function``: the module compiled, nothing can run here."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"compile-only: CuPy kernel {self.name!r} was compiled with NVRTC but cannot run here")


class _CountedKernel:
    """A kernel of a ``RawModule`` (``get_function``), launched through :class:`_Launcher`."""

    def __init__(self, kernel: Any, launcher: _Launcher) -> None:
        self._kernel, self._launcher = kernel, launcher

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], **kw: Any) -> Any:
        return self._launcher(self._kernel.__call__, grid, block, args, kw)

    def __getattr__(self, name: str) -> Any:  # attributes (num_regs, max_threads_per_block, ...) of the kernel
        return getattr(self._kernel, name)


def _compile_check(state: BuildState, obj: Any, what: str, compile_only: bool, name_expressions: Any) -> None:
    """Compile ``obj``'s source now; record it as a build; a failure is the candidate's compile error."""
    from musaenv.toolchains.cupy_nvrtc import nvrtc_compile

    start = time.perf_counter()
    if compile_only:
        r = nvrtc_compile(obj.code, COMPILE_ONLY_ARCH, tuple(obj.options), f"{what}.cu", tuple(name_expressions or ()))
        ok, log = r.ok, r.log
    else:
        import cupy

        try:
            obj.compile()
            ok, log = True, ""
        except cupy.cuda.compiler.CompileException as e:
            ok, log = False, str(e)
    seconds = round(time.perf_counter() - start, 4)
    state.builds.append(BuildRecord(what, ok, seconds, False, tier="nvrtc", kind="cupy"))
    if not ok:
        state.failed.append(log)
        raise BuildFailedError(f"compiling CuPy {what} failed:\n{log}")


def install_cupy_hook(state: BuildState, compile_only: bool, workdir: str) -> None:
    """Replace ``cupy.RawKernel`` and ``cupy.RawModule`` for this process (see the module docstring).

    CuPy's kernel cache stays in memory (and its directory, were it used, in the worker's own fresh workdir): CuPy
    fixes its default, ``~/.cupy``, when imported, which is before the sandbox moves ``HOME``, and a cache shared
    between candidates would let one candidate's binaries stand in for another's.
    """
    os.environ["CUPY_CACHE_IN_MEMORY"] = "1"
    os.environ["CUPY_CACHE_DIR"] = str(Path(workdir) / "cupy_kernel_cache")
    import cupy

    from musaenv.toolchains.cupy_nvrtc import _nvrtc

    _nvrtc()  # load libnvrtc now, before the sandbox narrows what the process may open
    launcher = _Launcher(state, cupy)
    base_kernel, base_module = cupy.RawKernel, cupy.RawModule

    class RawKernel(base_kernel):  # type: ignore[misc,valid-type]
        __doc__ = base_kernel.__doc__

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _compile_check(state, self, f"RawKernel {self.name}", compile_only, ())

        def __call__(self, grid: Any, block: Any, args: Sequence[Any], **kw: Any) -> Any:
            return launcher(super().__call__, grid, block, args, kw)

    class RawModule(base_module):  # type: ignore[misc,valid-type]
        __doc__ = base_module.__doc__

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _compile_check(state, self, "RawModule", compile_only, kwargs.get("name_expressions"))

        def get_function(self, name: str) -> Any:
            if compile_only:
                return _CompiledOnlyKernel(name)
            return _CountedKernel(super().get_function(name), launcher)

    cupy.RawKernel, cupy.RawModule = RawKernel, RawModule


def worker_hook(state: BuildState, req: CandidateRequest) -> None:
    """The cupy backend's worker hook (its record names it): CuPy kernels compiled when built, counted and put on
    torch's stream when launched."""
    try:
        install_cupy_hook(state, req.compile_only, req.workdir)
    except Exception as e:  # CuPy or NVRTC missing in the worker: the machine's problem
        raise WorkerHookError(f"the cupy backend cannot load CuPy/NVRTC here: {format_exc(e)}") from e
