"""Compile-only evaluations: make the candidate build everything it would build, without running anything.

The constructor is judged as KernelBench judges it: it runs (on the CPU, the default device), and an exception
that is not the absence of the device is the candidate's ``runtime_error`` with its traceback, whether it came
before or after the candidate's builds. Only the device's absence (a compiled-only extension used, CUDA or MUSA
missing from this torch, no driver) lets the evaluation go on to what was built.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from musaenv.isolation.messages import CandidateRequest
from musaenv.worker.failures import CandidateFailure, format_exc
from musaenv.worker.harness import ProgramModule
from musaenv.worker.loader_hook import BuildFailedError, DeviceAbsentError

__all__ = ["drive_builds", "is_device_absent"]

# What torch, its device runtimes and CuPy say when the device (or its driver or runtime) is not on this machine.
_NO_DEVICE = re.compile(
    r"Found no NVIDIA driver|No CUDA GPUs are available|not compiled with (CUDA|MUSA|ROCm)|CUDA driver|"
    r"no CUDA-capable device|cuda(GetDeviceCount|runtime)|torch\.(cuda|musa)\.is_available\(\) is False|"
    r"No module named '?(torch_musa|cupy)|cannot run here|Cannot access accelerator|not present; not runnable|"
    r"(CUDA|MUSA|HIP) error|libcuda\.so|NVML",
    re.IGNORECASE,
)
# Errors of the candidate's own Python that no device or meta tensor explains: a forward that raises one before
# building anything failed by its own code.
_OWN_ERRORS = (NameError, SyntaxError)


def is_device_absent(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) says the device is not on this machine."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, DeviceAbsentError) or _NO_DEVICE.search(f"{type(seen).__name__}: {seen}"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _construct(program: ProgramModule, req: CandidateRequest, model_cls: Any, state: Any) -> Any:
    """``ModelNew(*init_inputs)`` on the CPU; ``None`` when only the device's absence stopped it.

    Raises:
        CandidateFailure: ``compile_error`` when one of its builds failed, ``runtime_error`` when its own code
            raised (a wrong signature, a missing key, a name not defined), as on a machine with the device.
    """
    try:
        return model_cls(*program.init_inputs(req.init_seed))
    except BaseException as e:  # the candidate's code: anything it raises is judged here
        if state.failed:
            raise CandidateFailure("compile_error", state.failed[-1]) from None
        if isinstance(e, BuildFailedError) or not is_device_absent(e):
            raise CandidateFailure("runtime_error", "ModelNew's constructor raised:\n" + format_exc(e)) from None
        return None


def drive_builds(program: ProgramModule, req: CandidateRequest, model_cls: Any, state: Any) -> None:
    """Compile-only: run the constructor so builds made in ``__init__`` are checked too; when nothing was built
    yet, drive ``forward`` on meta tensors (shapes, no data) up to its first kernel call, so an extension built
    lazily in ``forward`` is checked as well. Nothing built at all is its own verdict, never ``compiled``.

    Raises:
        CandidateFailure: ``compile_error``, ``runtime_error`` (the candidate's code failed; before its builds too),
            or ``not_built`` (nothing was built, and only the device's absence or the meta tensors stopped it).
    """
    program.apply_shape(req.shapes[0])
    model = _construct(program, req, model_cls, state)
    if not state.builds and model is not None:
        try:  # stops at the first kernel call: a compiled-only module raises
            args = program.meta_inputs(req.trials[0].seed if req.trials else 0)
            with torch.no_grad(), torch.device("meta"):
                model.to("meta")(*args)
        except BaseException as e:  # meta tensors make much fail: only the candidate's own errors count
            if not state.failed and not state.builds and isinstance(e, _OWN_ERRORS) and not is_device_absent(e):
                raise CandidateFailure("runtime_error", "ModelNew.forward raised:\n" + format_exc(e)) from None
        if state.failed:
            raise CandidateFailure("compile_error", state.failed[-1])
    if not state.builds:
        raise CandidateFailure(
            "not_built",
            "compile-only: the candidate built no extension, neither when its module was imported, nor in "
            "ModelNew's constructor, nor in a forward call on meta tensors (shapes without data) up to its first "
            "kernel call; nothing was compiled, so nothing can be said about it on this machine",
        )
