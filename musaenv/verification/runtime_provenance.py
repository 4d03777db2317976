"""Which op computed forward's output: followed by value in the candidate worker (``torch_computed_output``).

Worker side (imports torch). The kernel-coverage floor (:mod:`musaenv.verification.coverage`) compares *time*, which
a kernel buys by padding: ``torch.softmax`` followed by a copy repeated 12 times read 0.986 and was ``correct``. This
rule asks what the kernels *contributed* instead. :class:`Provenance` is a ``TorchDispatchMode`` around one more
forward of trial 1 (run only when the profiled forward saw forbidden torch compute). It keeps a set of **known
values**: the forward's inputs, the model's parameters and buffers, and every output of an op whose tensor inputs
were all known (a creation op with no tensor input too, except the uninitialised ones). A value is known by what it
holds, not by which object holds it: a kernel's output that equals a known value (a copy, ``x + 0``, the input read
back) is known too, and a buffer a kernel wrote into is judged by what it holds when the next op reads it.

Every forbidden torch op (compute outside :data:`~musaenv.verification.coverage.ALLOWED_ATEN_OPS`) is recorded with
the signature of its output. When forward returns, each output is compared with them: an output that agrees with a
forbidden op's output on at least :data:`OUTPUT_SHARE` of the sampled elements, at twice the task's tolerance, was
computed by torch when

* that op's inputs were all known (torch computed the answer from the inputs: the kernels at most copied it), or
* that op, run again from known values, still gives the output: each input that was not known is recomputed by
  replaying the torch ops that made it, back to what a kernel made, which is replaced by the known value of the same
  size closest to it. A kernel that nudged the input by less than the answer notices (softmax spelled in four torch
  ops on it included); a kernel that did real work does not: ``torch.add(kernel(x), b)`` is another answer on ``x``.

A value's **signature** is its element count, :data:`SAMPLE` elements at positions drawn from a secret generator when
the mode is made (the candidate cannot know which elements are compared), and the float64 sum and sum of squares of
all elements (equal for any permutation: a transposed copy of a known value is known). Signatures, not copies: the
cost is two reductions and one gather per tensor an op reads or writes; the tensors the forward's ops return are held
(not copied) until it ends, for the replay. A "nudge" above counts only where it does not change the answer: the
comparison is at twice the task's tolerance, on the sampled elements above it.

The worker reports facts (matches, op counts); :mod:`musaenv.verification.runtime` judges them in the parent.
docs/verification.md says what this rule does not see.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from musaenv.isolation.reports import Match, ProvenanceReport
from musaenv.verification.coverage import is_allowed_aten_op
from musaenv.verification.runtime_perturb import tensors_in

__all__ = ["MAX_OPS", "OUTPUT_SHARE", "SAMPLE", "Provenance", "Signature"]

#: Elements compared per value, at secret positions. Only elements above the tolerance say anything
#: (:meth:`Signature.agrees`), and on the built-in softmax task (``4 randn + 100``) 4.4 % of the outputs are: 1024
#: positions hold ~45 of them (none at all with probability 0.956^1024 ~ 1e-20; 256 would miss them all once in
#: ~10^5). A kernel that rewrites k of n elements to break an equality goes unseen by all 1024 with probability
#: (1 - k/n)^1024, under 4e-5 once k/n reaches 1 %.
SAMPLE = 1024
#: Share of the sampled elements that must agree for an output to count as a torch op's. Below 1 so that a kernel
#: rewriting a few elements of torch's answer does not escape; 0.9 so that an honest epilogue kernel after a torch
#: op is not matched (a ReLU after a matmul changes about half the elements).
OUTPUT_SHARE = 0.9
#: Ops followed in one forward. A forward that runs more is reported as truncated (an error where the rule decides):
#: otherwise padding forward with cheap ops would buy the rest of it out of the check.
MAX_OPS = 4096
# Sums of a permutation agree to rounding (float64 sums in a different order: ~1e-16 per element); 1e-9 of the scale
# leaves margin for 10^7 elements and still tells apart values that differ in any element by more than ~1e-4.
_PERMUTATION_REL = 1e-9
# Torch ops replayed back from the one whose output matched, at most (a forward's chain of torch ops is far shorter).
_REPLAY_DEPTH = 64
# Ops whose output holds no value yet: never known, whatever their inputs.
_UNINITIALISED = frozenset(
    f"aten::{n}" for n in ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "set_")
)


@dataclass(frozen=True)
class Signature:
    """What is compared of one value: element count, sampled elements (float64), sum and sum of squares."""

    numel: int
    sample: np.ndarray
    moments: tuple[float, float]

    def agrees(self, other: Signature, atol: float, rtol: float) -> float:
        """Share of the sampled elements within (atol, rtol) of ``other``'s, among those that carry a value (above
        ``atol`` in either): two elements both within the tolerance of zero agree whatever computed them (softmax of
        ``4 * randn + 100`` is below fp32's atol almost everywhere, as is ``exp(x - max)``). 0 when the counts
        differ or neither carries a value anywhere."""
        a, b = self.sample, other.sample
        if other.numel != self.numel or a.shape != b.shape:
            return 0.0
        close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        carries = (np.abs(a) > atol) | (np.abs(b) > atol) | np.isnan(a) | np.isnan(b)
        return float(np.mean(close[carries])) if carries.any() else 0.0

    def permutations(self, moments: np.ndarray) -> np.ndarray:
        """Per row of ``moments`` (sum, sum of squares of values with this element count): whether the sums say it
        holds this value's elements in another order."""
        s1, s2 = self.moments
        scale = np.maximum(np.abs(moments[:, 1]), 1e-30)
        same = (np.abs(moments[:, 1] - s2) <= _PERMUTATION_REL * scale) & (
            np.abs(moments[:, 0] - s1) <= _PERMUTATION_REL * np.sqrt(scale * self.numel)
        )
        return same & (s2 > 0)  # all zeros: a permutation of anything zero, which says nothing


@dataclass
class _Known:
    """Known values with one element count: their signatures and tensors (the tensors for the replay)."""

    sigs: list[Signature] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)
    stacked: tuple[np.ndarray, np.ndarray] | None = None  # samples and sums stacked, rebuilt after additions

    def add(self, sig: Signature, t: torch.Tensor) -> None:
        self.sigs.append(sig)
        self.tensors.append(t)
        self.stacked = None

    def stack(self) -> tuple[np.ndarray, np.ndarray]:
        """The samples and the sums of the values, stacked (one row each)."""
        if self.stacked is None:
            self.stacked = np.stack([s.sample for s in self.sigs]), np.array([s.moments for s in self.sigs])
        return self.stacked

    def nearest(self, sig: Signature, atol: float, rtol: float) -> tuple[int, bool]:
        """Index of the known value closest to ``sig`` (mean absolute difference over the sample) and whether it
        matches: every sampled element within (atol, rtol), or the same elements in another order."""
        stack, moments = self.stack()
        diff = np.abs(stack - sig.sample)
        close = (diff <= atol + rtol * np.abs(sig.sample)) | (np.isnan(stack) & np.isnan(sig.sample))
        full = np.flatnonzero(close.all(axis=1))
        if full.size:
            return int(full[0]), True
        best = int(np.argmin(np.nan_to_num(diff, nan=np.inf).mean(axis=1)))
        return best, bool(sig.permutations(moments).any())


@dataclass
class _Op:
    """One op of the forward: its name, its outputs and their signatures, and what it takes to run it again."""

    index: int
    name: str
    results: list[torch.Tensor]  # held until the report: their identities name what later ops read
    outputs: list[Signature | None]
    func: Any
    args: Any
    kwargs: Any
    inputs: list[Signature | None]  # per tensor input (tensors_in order), before the op ran
    unknown: list[bool]  # per tensor input: whether it was not a known value

    @property
    def from_known(self) -> bool:
        return not any(self.unknown)


def _share(out: Signature, sigs: Sequence[Signature | None], atol: float, rtol: float) -> float:
    """The best share of ``out``'s sampled elements that agree with one of ``sigs``; 1 for a permutation of one
    (torch's answer transposed by a kernel)."""
    same = [s for s in sigs if s is not None and s.numel == out.numel]
    if same and out.permutations(np.array([s.moments for s in same])).any():
        return 1.0
    return max((out.agrees(s, atol, rtol) for s in same), default=0.0)


def _usable(t: torch.Tensor) -> bool:
    return t.numel() > 0 and t.layout == torch.strided and not t.is_meta and not t.is_complex()


class Provenance(TorchDispatchMode):
    """Follows values through one forward (module docstring).

    Args:
        roots: The forward's inputs and the model's parameters and buffers: known from the start.
        atol: The task's absolute tolerance (a value within it of a known one is known).
        rtol: The task's relative tolerance.
    """

    def __init__(self, roots: Sequence[Any], atol: float, rtol: float) -> None:
        super().__init__()
        self.atol, self.rtol = float(atol), float(rtol)
        rng = np.random.default_rng(secrets.randbits(64))
        self._u = np.sort(rng.random(SAMPLE))
        self._known: dict[int, _Known] = {}
        self._positions: dict[tuple[int, str], torch.Tensor] = {}
        self.forbidden: list[_Op] = []
        self._log: list[_Op] = []
        self._made: dict[int, list[int]] = {}  # id of a tensor an op returned -> the ops that returned it
        self.ops = 0
        self.truncated = False
        for t in tensors_in(list(roots)):
            sig = self._signature(t) if _usable(t) else None
            if sig is not None:
                self._remember(t.detach(), sig)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as runtime_profile._OpRecorder: nothing is compiled here, torch._dynamo costs seconds

    def signature(self, t: torch.Tensor) -> Signature:
        """The signature of ``t``'s current values."""
        flat = t.detach().reshape(-1)
        if not flat.is_floating_point():
            flat = flat.to(torch.float64)
        n = flat.numel()
        key = (n, str(flat.device))
        if key not in self._positions:
            pos = np.arange(n) if n <= SAMPLE else np.minimum((self._u * n).astype(np.int64), n - 1)
            self._positions[key] = torch.from_numpy(pos).to(flat.device)
        sample = flat.index_select(0, self._positions[key]).to(torch.float64).cpu().numpy()
        # Squares in the value's own precision, sums in float64: a permutation squares the same elements to the same
        # bits, and no float64 copy of a large value is made.
        moments = torch.stack([flat.sum(dtype=torch.float64), flat.square().sum(dtype=torch.float64)]).tolist()
        return Signature(n, sample, (moments[0], moments[1]))

    def _signature(self, t: torch.Tensor) -> Signature | None:
        """:meth:`signature`, or ``None`` for a value it cannot read (a quantized tensor, say): never known."""
        try:
            return self.signature(t)
        except (RuntimeError, TypeError, ValueError):
            return None

    def _remember(self, t: torch.Tensor, sig: Signature) -> None:
        bucket = self._known.setdefault(sig.numel, _Known())
        if not bucket.sigs or not bucket.nearest(sig, 0.0, 0.0)[1]:  # an exact copy of a known value adds nothing
            bucket.add(sig, t)

    def is_known(self, sig: Signature) -> bool:
        """Whether a value with this signature is known (module docstring)."""
        bucket = self._known.get(sig.numel)
        return bucket is not None and bool(bucket.sigs) and bucket.nearest(sig, self.atol, self.rtol)[1]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.ops >= MAX_OPS:
            self.truncated = True
            return func(*args, **kwargs)
        self.ops += 1
        name = str(func._schema.name)
        inputs = [t for t in tensors_in([list(args), kwargs]) if _usable(t)]
        before = [self._signature(t) for t in inputs]  # before the op: in-place ops write their inputs
        unknown = [sig is None or not self.is_known(sig) for sig in before]
        out = func(*args, **kwargs)
        results = [t for t in tensors_in(out) if _usable(t)]
        # an uninitialised buffer holds no value worth a signature: what a kernel writes into it is the kernel's
        sigs = [None if name in _UNINITIALISED else self._signature(t) for t in results]
        op = _Op(len(self._log), name, results, sigs, func, args, kwargs, before, unknown)
        self._log.append(op)
        for t in results:
            self._made.setdefault(id(t), []).append(op.index)
        if name in _UNINITIALISED:
            return out
        if not any(unknown):
            for t, sig in zip(results, sigs):
                if sig is not None:
                    self._remember(t.detach(), sig)
        if name.startswith("aten::") and not is_allowed_aten_op(name):
            self.forbidden.append(op)
        return out

    def report(self, outputs: Sequence[torch.Tensor], wall_ms: float | None = None) -> ProvenanceReport:
        """Facts for the parent: ops followed, forbidden ops, and each output a forbidden op computed."""
        matches: list[Match] = []
        for k, o in enumerate(outputs):
            sig = self._signature(o) if _usable(o) else None
            if sig is not None:
                found = self._computed_by(k, sig)
                if found is not None:
                    matches.append(found)
        return ProvenanceReport(
            ops=self.ops,
            truncated=self.truncated,
            max_ops=MAX_OPS,
            forbidden=len(self.forbidden),
            from_inputs=sum(op.from_known for op in self.forbidden),
            matches=matches,
            wall_ms=wall_ms,
        )

    def _computed_by(self, output: int, out: Signature) -> Match | None:
        atol, rtol = 2 * self.atol, 2 * self.rtol  # the output and torch's each within the tolerance of the answer
        for op in reversed(self.forbidden):  # the latest op first: the one nearest the output
            share = _share(out, op.outputs, atol, rtol)
            if share < OUTPUT_SHARE:
                continue
            if op.from_known:
                return Match(output, op.name, round(share, 4), "inputs")
            again = self._replayed(op)
            if again is not None and _share(out, again, atol, rtol) >= OUTPUT_SHARE:
                return Match(output, op.name, round(share, 4), "replay")
        return None

    def _replayed(self, op: _Op) -> list[Signature | None] | None:
        """``op`` run again from known values: each input that was not known is recomputed by replaying the torch
        op that made it (when it still held that op's result: a kernel did not write into it since), back to values
        no torch op made (a kernel's output), which are replaced by the nearest known value of their size. ``None``
        when one has no known value of its size, or an op refuses the replacement."""
        try:
            return [self._signature(t) for t in self._replay(op, {}, 0)]
        except (LookupError, RuntimeError, TypeError, ValueError, IndexError):
            return None

    def _replay(self, op: _Op, memo: dict[int, list[torch.Tensor]], depth: int) -> list[torch.Tensor]:
        if op.index in memo:
            return memo[op.index]
        if depth > _REPLAY_DEPTH or op.name in _UNINITIALISED:
            raise LookupError(op.name)
        inputs: Iterator[tuple[Signature | None, bool]] = iter(zip(op.inputs, op.unknown))

        def swap(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            if not _usable(x):
                return x.clone()
            sig, unknown = next(inputs)
            if not unknown:
                return x.detach().clone()
            if sig is None:
                raise LookupError(x.numel())
            source = self._maker(x, op.index, sig)
            if source is not None:
                return self._replay(source[0], memo, depth + 1)[source[1]].clone()
            near = self._nearest_intact(sig)
            return near.reshape(-1).to(x.dtype).reshape(x.shape).clone()

        args, kwargs = tree_map(swap, (op.args, op.kwargs))
        out = op.func(*args, **kwargs)
        memo[op.index] = [t for t in tensors_in(out) if _usable(t)]
        return memo[op.index]

    def _nearest_intact(self, sig: Signature) -> torch.Tensor:
        """The known value of ``sig``'s size nearest to it that still holds what it held when it became known (a
        kernel may have written into a buffer torch made since: that buffer holds the kernel's value now)."""
        bucket = self._known.get(sig.numel)
        if bucket is None or not bucket.sigs:
            raise LookupError(sig.numel)
        stack, _ = bucket.stack()
        for i in np.argsort(np.nan_to_num(np.abs(stack - sig.sample), nan=np.inf).mean(axis=1), kind="stable"):
            now = self._signature(bucket.tensors[int(i)])
            if now is not None and np.array_equal(now.sample, bucket.sigs[int(i)].sample, equal_nan=True):
                return bucket.tensors[int(i)]
        raise LookupError(sig.numel)

    def _maker(self, x: torch.Tensor, before: int, sig: Signature) -> tuple[_Op, int] | None:
        """The op (and which of its results) that last returned ``x`` before op ``before``, if ``x`` still held
        exactly what it returned then (a kernel that wrote into it since makes it a kernel's value)."""
        for index in reversed(self._made.get(id(x), [])):
            if index >= before:
                continue
            maker = self._log[index]
            k = next((k for k, t in enumerate(maker.results) if t is x), -1)
            made = maker.outputs[k] if k >= 0 else None
            if made is None or made.numel != sig.numel or not np.array_equal(made.sample, sig.sample, equal_nan=True):
                return None
            return maker, k
        return None
