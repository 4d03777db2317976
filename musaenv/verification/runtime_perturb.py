"""The overwrite probe of the runtime checks (worker side): overwrite one extension call's results in place.

Used by :class:`~musaenv.verification.runtime_probe.RuntimeGuard` for ``output_not_from_kernel``
(docs/verification.md): in a candidate whose kernels produce the output, overwriting the last kernel call's result
must change the output.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["Perturber", "storage_key", "tensors_in"]


def tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors in ``obj`` (a tensor, or tuples, lists and dicts of them, nested)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from tensors_in(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from tensors_in(x)


def _perturb(t: torch.Tensor, gens: dict[str, torch.Generator]) -> bool:
    """Overwrite ``t`` in place with values unrelated to its own; False when it cannot be written."""
    try:
        if t.is_floating_point():
            key = str(t.device)
            if key not in gens:
                gens[key] = torch.Generator(device=t.device)
                gens[key].manual_seed(0x5EED)
            t.uniform_(3.0, 5.0, generator=gens[key])  # a fixed band unrelated to the kernel's values
        elif t.dtype == torch.bool:
            t.logical_not_()
        elif not t.is_complex():
            t.add_(1)
        else:
            return False
    except RuntimeError:  # overlapping (expanded) or read-only memory
        return False
    return True


def storage_key(t: torch.Tensor) -> int:
    """The storage ``t`` lives in (its address), or the tensor itself where it has none."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, AttributeError):  # no storage (meta, sparse): key on the tensor itself
        return id(t)


class Perturber:
    """Call hook that overwrites the results and tensor arguments of one extension call, restoring them later.

    The overwritten call is the last one of a forward: in a candidate whose kernels produce the output, the output
    is that call's result (or an argument it wrote) passed through plumbing, so it must change.
    """

    def __init__(self, target: int, protected: set[int]) -> None:
        self.target = target
        self.protected = protected  # storages of forward's inputs and the model's weights: arguments never touched
        self.hit = 0
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.gens: dict[str, torch.Generator] = {}

    def __call__(self, count: int, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        if count != self.target:
            return
        seen: set[tuple[int, int]] = set()
        outs = list(tensors_in(result))
        # Arguments that are forward's inputs or weights are left alone: a decoy that reads them again after the
        # call would otherwise see its own input change. Results are always overwritten.
        written = [t for t in [*tensors_in(list(args)), *tensors_in(kwargs)] if storage_key(t) not in self.protected]
        with torch.no_grad():
            for t in [*outs, *written]:
                key = (t.data_ptr(), t.numel())
                if t.numel() == 0 or key in seen:
                    continue
                seen.add(key)
                backup = t.detach().clone()
                if _perturb(t.detach(), self.gens):
                    self.saved.append((t, backup))
                    self.hit += 1

    def restore(self) -> None:
        """Put back every overwritten tensor (model weights among the arguments must survive)."""
        with torch.no_grad():
            for t, backup in reversed(self.saved):
                t.detach().copy_(backup)
        self.saved.clear()
