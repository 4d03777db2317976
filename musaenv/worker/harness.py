"""Worker-side helpers: load programs, make seeded inputs, turn outputs into arrays (imports torch).

Only the worker process imports this module.
"""

from __future__ import annotations

import contextlib
import linecache
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from musaenv.isolation.messages import RunRequest
from musaenv.isolation.plans import TimingPlan, TrialSpec

__all__ = [
    "CudaToDevice",
    "DrawnInputs",
    "ProgramModule",
    "draw_inputs",
    "find_aliasing",
    "flatten_outputs",
    "load_program",
    "seed_all",
    "stress_transform",
    "tensor_to_array",
    "to_device",
]


def seed_all(seed: int) -> None:
    """Seed torch's CPU and device generators (KernelBench seeds before building models and inputs)."""
    torch.manual_seed(int(seed) % (2**63))


def load_program(source: str, name: str, filename: str) -> types.ModuleType:
    """Execute a program's source as a fresh module (not registered in ``sys.modules``).

    The source is registered with :mod:`linecache` so tracebacks show the candidate's own lines.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)
    return module


def _is_cuda(v: Any) -> bool:
    if isinstance(v, torch.device):
        return v.type == "cuda"
    return isinstance(v, str) and v.split(":", 1)[0] == "cuda"


class CudaToDevice(TorchFunctionMode):
    """Runs reference code written for a CUDA machine on ``target``: ``.cuda()``, ``.to("cuda")`` and
    ``device="cuda"`` go to ``target`` instead (KernelBench's prompt examples and older KernelBench files draw their
    inputs with ``.cuda()``; on a CPU evaluation that would fail before the candidate is even judged)."""

    def __init__(self, target: torch.device) -> None:
        super().__init__()
        self.target = target

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0].to(self.target)
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = self.target
        if func is torch.Tensor.to:
            args = [self.target if _is_cuda(a) else a for a in args]
        return func(*args, **kwargs)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_size(v: Any) -> bool:
    """A module global that a shape may override: a number, or a tuple or list of numbers."""
    if isinstance(v, (tuple, list)):
        return 0 < len(v) <= 256 and all(_is_number(x) for x in v)
    return _is_number(v)


class ProgramModule:
    """A loaded reference program with its size constants settable per shape.

    ``draw_device`` (a CUDA device): inputs are drawn straight on it, ``get_inputs()`` running under
    ``with torch.device(...)``, so its factory calls (``torch.randn`` ...) allocate and fill on the GPU. The
    file format creates CPU tensors, and at the GPU tier's sizes (268-537 MB per input for 13 built-in tasks)
    a single-threaded CPU ``randn`` took 1.6-1.9 s per input here, 16 times for a timing pool. The values come
    from the GPU's generator under the same seeds, in the candidate's worker and the reference's alike. A
    ``get_inputs`` that fails there (CPU-only code) is drawn on the CPU from then on in this process.

    ``device`` (the evaluation's device, when it is not CUDA): ``.cuda()`` and ``device="cuda"`` in the program's
    ``get_inputs``/``get_init_inputs`` are mapped to it (:class:`CudaToDevice`).
    """

    def __init__(
        self, module: types.ModuleType, draw_device: torch.device | None = None, device: torch.device | None = None
    ) -> None:
        self.module = module
        self.draw_device = draw_device
        self.cuda_to = device if device is not None and device.type != "cuda" else None
        self._defaults = {k: v for k, v in vars(module).items() if not k.startswith("_") and _is_size(v)}

    @property
    def size_names(self) -> set[str]:
        """The size constants of the program (those :meth:`apply_shape` sets)."""
        return set(self._defaults)

    def apply_shape(self, shape: dict[str, Any]) -> None:
        """Reset the size constants to the file's values, then apply ``shape``'s overrides.

        A list where the file has a tuple (shapes travel as JSON) is set as a tuple, as the program wrote it.
        """
        for k, v in self._defaults.items():
            setattr(self.module, k, list(v) if isinstance(v, list) else v)
        for k, v in shape.items():
            if isinstance(v, list) and isinstance(self._defaults.get(k), tuple):
                v = tuple(v)
            setattr(self.module, k, v)

    def init_inputs(self, seed: int) -> list[Any]:
        """``get_init_inputs()`` under ``seed``."""
        seed_all(seed)
        with self._mapped():
            return list(self.module.get_init_inputs())

    def _mapped(self) -> Any:
        return CudaToDevice(self.cuda_to) if self.cuda_to is not None else contextlib.nullcontext()

    def build_model(self, model_cls: Any, shape: dict[str, Any], init_seed: int, device: torch.device) -> Any:
        """``model_cls(*get_init_inputs())`` at ``shape``, parameters seeded with ``init_seed + 1``, on ``device``
        (the same construction for reference and candidate, so their parameters agree)."""
        self.apply_shape(shape)
        init = self.init_inputs(init_seed)
        seed_all(init_seed + 1)
        return model_cls(*init).to(device)

    def inputs(self, seed: int) -> list[Any]:
        """``get_inputs()`` under ``seed`` (CPU tensors, as the file format prescribes, unless ``draw_device``)."""
        seed_all(seed)
        if self.draw_device is not None:
            try:
                with self.draw_device:
                    return list(self.module.get_inputs())
            except Exception:  # CPU-only input code: every later draw of this process on the CPU
                self.draw_device = None
                seed_all(seed)
        with self._mapped():
            return list(self.module.get_inputs())

    def meta_inputs(self, seed: int) -> list[Any]:
        """``get_inputs()`` on the meta device: shapes and dtypes without memory or arithmetic (compile-only)."""
        seed_all(seed)
        with torch.device("meta"), CudaToDevice(torch.device("meta")):
            return list(self.module.get_inputs())


def to_device(args: Sequence[Any], device: torch.device) -> list[Any]:
    """Move tensor arguments to ``device``."""
    return [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]


def flatten_outputs(out: Any) -> list[Any]:
    """A forward's result as a flat list (a tensor, or a tuple/list of them)."""
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def tensor_to_array(t: torch.Tensor) -> np.ndarray:
    """Copy a tensor to a host numpy array; half types are widened to float32 (exactly)."""
    t = t.detach()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return np.ascontiguousarray(t.cpu().numpy())


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return (0, 0)
    start = t.data_ptr()
    extent = sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
    return start, start + extent * t.element_size()


def find_aliasing(outputs: Sequence[Any], inputs: Sequence[Any]) -> list[str]:
    """Names of outputs whose memory overlaps an input's memory (an output must be its own storage)."""
    found = []
    in_ranges = [(i, _byte_range(a)) for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
    for j, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor) or o.numel() == 0:
            continue
        lo, hi = _byte_range(o)
        for i, (ilo, ihi) in in_ranges:
            if ilo < hi and lo < ihi and ihi > ilo:
                found.append(f"output {j} overlaps input {i}")
    return found


def stress_transform(args: list[Any], scale: float, offset: float) -> list[Any]:
    """A stress trial's inputs: every floating-point tensor ``x * scale + offset`` in its own dtype; integer and bool
    tensors and non-tensors as drawn (indices and masks keep their meaning). The same code in both workers on the
    same values gives the candidate and the reference the same bits."""
    if scale == 1.0 and offset == 0.0:
        return args
    return [a * scale + offset if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


@dataclass
class DrawnInputs:
    """Inputs drawn ahead of time: per (shape index, seed) of a trial, and the timing pool (``None``: not drawn).

    What was not drawn ahead is drawn on request, so an empty instance (:meth:`nothing`) draws everything late.
    """

    trials: dict[tuple[int, int, float, float], list[Any]]
    pool: list[list[Any]] | None

    @classmethod
    def nothing(cls) -> DrawnInputs:
        """Nothing drawn ahead (GPU tiers: inputs are drawn when needed, then moved to the device)."""
        return cls({}, None)

    def trial_inputs(self, program: ProgramModule, trial: TrialSpec) -> list[Any]:
        """This trial's inputs, a stress trial's transformed (the shape must be applied already)."""
        key = trial.key
        drawn = self.trials.get(key)
        return drawn if drawn is not None else stress_transform(program.inputs(key[1]), key[2], key[3])

    def pool_inputs(self, program: ProgramModule, timing: TimingPlan) -> list[list[Any]]:
        """The timing pool (the timing shape must be applied already)."""
        if self.pool is not None:
            return self.pool
        return [program.inputs(timing.seed + i) for i in range(timing.pool)]


def draw_inputs(req: RunRequest, program: ProgramModule) -> DrawnInputs:
    """Draw every input of a CPU evaluation before the device is granted (and before candidate code runs).

    Drawing is a large part of an evaluation (16 timing inputs of 8 MB take ~0.25 s here); done while the
    evaluation does not hold the device, it overlaps other evaluations' runs instead of serialising with them.
    """
    trials = {}
    for trial in req.trials:
        key = trial.key
        program.apply_shape(req.shapes[key[0]])
        trials[key] = DrawnInputs.nothing().trial_inputs(program, trial)
    pool = None
    if req.timing and not req.timing.paired:  # paired timing draws each call's inputs when it is prepared
        program.apply_shape(req.shapes[0])
        pool = DrawnInputs.nothing().pool_inputs(program, req.timing)
    return DrawnInputs(trials, pool)
