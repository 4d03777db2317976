"""Compile-only evaluations: make the candidate build everything it would build, without running anything."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from musaenv.isolation.messages import CandidateRequest
from musaenv.worker.failures import CandidateFailure
from musaenv.worker.harness import ProgramModule

__all__ = ["drive_builds"]


def drive_builds(program: ProgramModule, req: CandidateRequest, model_cls: Any, state: Any) -> None:
    """Compile-only: run the constructor so builds made in ``__init__`` are checked too; when nothing was built
    yet, drive ``forward`` on meta tensors (shapes, no data) up to its first kernel call, so an extension built
    lazily in ``forward`` is checked as well. Nothing built at all is its own verdict, never ``compiled``."""
    program.apply_shape(req.shapes[0])
    model = None
    with contextlib.suppress(BaseException):  # no device here: a constructor that touches it fails after its builds
        model = model_cls(*program.init_inputs(req.init_seed))
    if state.failed:
        raise CandidateFailure("compile_error", state.failed[-1])
    if not state.builds and model is not None:
        with contextlib.suppress(BaseException):  # stops at the first kernel call: a compiled-only module raises
            args = program.meta_inputs(int(req.trials[0]["seed"]) if req.trials else 0)
            with torch.no_grad(), torch.device("meta"):
                model.to("meta")(*args)
        if state.failed:
            raise CandidateFailure("compile_error", state.failed[-1])
    if not state.builds:
        raise CandidateFailure(
            "not_built",
            "compile-only: the candidate built no extension, neither when its module was imported, nor in "
            "ModelNew's constructor, nor in a forward call on meta tensors (shapes without data) up to its first "
            "kernel call; nothing was compiled, so nothing can be said about it on this machine",
        )
