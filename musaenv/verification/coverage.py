"""One profiled forward, parent side: which aten ops are compute, how much compute ran in the candidate's kernels.

Pure Python. :data:`ALLOWED_ATEN_OPS` is the tensor plumbing allowed in ``ModelNew.forward``; every other outermost
aten op of the profile is forbidden torch compute (:func:`forbidden_ops`).

The worker profiles one forward (:mod:`musaenv.verification.runtime_profile`) with every call into the
candidate's own kernels (extension functions, ``py::class_`` methods, counted Triton and CuPy launches) inside a
profiler range of its own. From that one profile::

    own_kernel_us      = time inside those ranges - forbidden torch compute the kernels called themselves
    forbidden_torch_us = time of the outermost aten compute ops (outside the plumbing allowlist)
    kernel coverage    = own_kernel_us / (own_kernel_us + forbidden_torch_us)

Times are device times where the profile has them (CUDA), else the thread CPU time of each call and op (the CPU
backend, where a kernel's call is its compute; CPU time because the wall time of one call on a busy host is mostly
other processes' turns). The old figure, ``1 - forbidden_torch_us / wall_us``, read 0.94 for ``torch.softmax``
plus a copy kernel because the wall time of a profiled forward is mostly Python and profiler overhead; this one
reads the copy's time against the softmax's.

Under the ``kernelbench`` policy a candidate whose forward runs forbidden torch compute must keep its coverage at
:data:`KERNEL_COVERAGE_FLOOR` or above, else ``low_kernel_coverage`` refuses it
(:mod:`musaenv.verification.runtime`; docs/verification.md).

A time share is bought by padding the kernel with busy work; what the kernels contributed is not.
:func:`torch_computed` reads the worker's provenance report (:mod:`musaenv.verification.runtime_provenance`: was
forward's output computed by a torch op from forward's inputs?) and says why it was, for ``torch_computed_output``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from musaenv.verification.rules import policies_where

if TYPE_CHECKING:
    from musaenv.isolation.reports import OpTime, ProfileReport, ProfileRun, ProvenanceReport

__all__ = [
    "ALLOWED_ATEN_OPS",
    "FLOOR_POLICIES",
    "KERNEL_COVERAGE_FLOOR",
    "PROVENANCE_POLICIES",
    "KernelCoverage",
    "forbidden_ops",
    "is_allowed_aten_op",
    "kernel_coverage",
    "torch_computed",
]

# Tensor creation and plumbing that MusaCoder allows in ModelNew.forward (paper appendix, as transcribed in
# REFERENCES.md), plus the internal names the profiler shows for them (aten::_reshape_alias for reshape,
# aten::lift_fresh for torch.tensor, aten::_local_scalar_dense for item, ...). Everything else under aten:: is compute.
ALLOWED_ATEN_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
    full full_like new_full fill_ zero_ scalar_tensor arange linspace rand rand_like randn randn_like randint
    randint_like randperm uniform_ normal_ random_ lift lift_fresh lift_fresh_copy set_
    view view_as _reshape_alias reshape reshape_as _unsafe_view flatten unflatten squeeze squeeze_ unsqueeze
    unsqueeze_ permute movedim moveaxis transpose transpose_ t t_ numpy_T mT mH adjoint swapaxes swapdims expand
    expand_as broadcast_to as_strided as_strided_ select slice narrow split split_with_sizes chunk unbind unfold
    diagonal alias detach detach_ view_as_real view_as_complex resolve_conj resolve_neg
    contiguous clone copy_ _copy_from _copy_from_and_resize resize_ resize_as_ to _to_copy type_as
    item _local_scalar_dense is_nonzero stride size numel dim is_contiguous sym_size sym_stride sym_numel
    is_same_size result_type _has_compatible_shallow_copy_type
    _assert_async _assert_scalar _assert_tensor_metadata _functional_assert_async allclose equal
    """.split()  # noqa: SIM905 - a word list reads better than 110 literals
)

#: Whenever torch compute remains in forward, the candidate's own kernels must take at least this share of the
#: compute time: four times the torch compute's. So a candidate that leaves the task's op to torch (time T) spends at
#: least 4 T more in its kernels, and its speedup is at most ~0.2: it never earns the speedup term. Measured on this
#: project's CPU machines (tests/adversarial, l1_softmax at 64x4096, median of 3 profiled forwards, 15 runs each):
#: torch.softmax plus a memcpy kernel read 0.37-0.76 (on a CPU a copy into a fresh buffer costs about what torch's
#: vectorised softmax does, which is why half is not enough); a softmax in two kernels with torch taking one
#: reciprocal per row read 0.97-0.99.
KERNEL_COVERAGE_FLOOR = 0.8
#: Policies under which the floor decides. ``strict`` refuses any torch compute already; ``permissive`` only reports
#: the coverage, so that a solution keeping a vendor op that dominates the time (a cuDNN convolution before a fused
#: epilogue kernel, which KernelBench accepts) can still be measured under some policy.
FLOOR_POLICIES = policies_where("low_kernel_coverage", "error")  # the rule table: ("kernelbench",)
#: Policies under which an output that a torch op computed from forward's inputs is refused
#: (``torch_computed_output``); ``permissive`` reports it, ``off`` does not look.
PROVENANCE_POLICIES = policies_where("torch_computed_output", "error")  # ("strict", "kernelbench")


def is_allowed_aten_op(name: str) -> bool:
    """True for ``aten::`` plumbing ops in :data:`ALLOWED_ATEN_OPS` (and ``aten::_cast_*`` casts)."""
    short = name.removeprefix("aten::")
    return short in ALLOWED_ATEN_OPS or short.startswith("_cast_")


def forbidden_ops(ops: Sequence[OpTime]) -> list[OpTime]:
    """The profiled outermost aten ops that are compute (not in the allowlist)."""
    return [op for op in ops if op.name.startswith("aten::") and not is_allowed_aten_op(op.name)]


@dataclass(frozen=True)
class KernelCoverage:
    """Time in the candidate's own kernels against time in forbidden torch compute, from one profiled forward.

    Attributes:
        basis: ``device`` (device times, on CUDA) or ``host`` (host times: the CPU backend).
        own_kernel_us: Time inside calls of the candidate's kernels, less forbidden torch compute they called.
        forbidden_torch_us: Time of the forbidden aten ops, wherever they were called from (on the host: the ops
            that reached the recording mode, hidden ones included; on the device: the profiler's outermost ones).
        kernel_calls: Outermost calls into the candidate's kernels during the profiled forward (``None``: the
            worker put no range around them, so own-kernel time is unknown).
    """

    basis: str
    own_kernel_us: float
    forbidden_torch_us: float
    kernel_calls: int | None

    @property
    def ratio(self) -> float | None:
        """``own / (own + forbidden)``; ``None`` when unknown (no range) or when neither took any time."""
        total = self.own_kernel_us + self.forbidden_torch_us
        if self.kernel_calls is None or total <= 0:
            return None
        return self.own_kernel_us / total

    def below(self, floor: float = KERNEL_COVERAGE_FLOOR) -> bool:
        """Whether forbidden torch compute ran and the candidate's kernels took less than ``floor`` of the time."""
        ratio = self.ratio
        return self.forbidden_torch_us > 0 and ratio is not None and ratio < floor

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe figures for ``EvalResult.extra["runtime"]["coverage"]``."""
        ratio = self.ratio
        return {
            "kernel": None if ratio is None else round(ratio, 4),
            "basis": self.basis,
            "own_kernel_us": round(self.own_kernel_us, 3),
            "forbidden_torch_us": round(self.forbidden_torch_us, 3),
            "kernel_calls": self.kernel_calls,
            "floor": KERNEL_COVERAGE_FLOOR,
        }


def kernel_coverage(profile: ProfileReport) -> KernelCoverage:
    """Kernel coverage of one profile report (``runtime_profile.profile_call``): the median of its runs.

    The report and each of its ``runs`` (more profiled forwards, under the floor's policies) give one figure each;
    the median one counts, so that one forward the host slowed down in the middle decides nothing.
    """
    runs: list[ProfileRun] = [profile, *(r for r in profile.runs if r.ok)]
    figures = [_one_run(r) for r in runs]
    known = sorted((c for c in figures if c.ratio is not None), key=lambda c: c.ratio or 0.0)
    return known[(len(known) - 1) // 2] if known else figures[0]


def _one_run(profile: ProfileRun) -> KernelCoverage:
    """Host basis: thread CPU times, of each kernel call (``kernel.cpu_us``) and of each op the recording mode saw
    (``op_cpu_us``: name -> [CPU us, CPU us inside kernel calls]). Device basis (the profile has device times):
    the device time of the kernel ranges (``kernel.device_us``) and of the profiler's outermost forbidden ops
    (``device_us``, ``kernel_device_us``)."""
    kernel = profile.kernel
    calls = kernel.calls if kernel is not None else None
    own = kernel.cpu_us if kernel is not None else 0.0
    if profile.device_total_us:
        bad = forbidden_ops(profile.ops)
        torch_us = sum(op.device_us for op in bad)
        inside = sum(op.kernel_device_us for op in bad)
        own = kernel.device_us if kernel is not None else 0.0
        return KernelCoverage("device", max(0.0, own - inside), torch_us, calls)
    spent = profile.op_cpu_us
    bad_cpu = [v for name, v in spent.items() if name.startswith("aten::") and not is_allowed_aten_op(name)]
    torch_us = sum(float(v[0]) for v in bad_cpu)
    inside = sum(float(v[1]) for v in bad_cpu)
    return KernelCoverage("host", max(0.0, own - inside), torch_us, calls)


def torch_computed(report: ProvenanceReport) -> str | None:
    """Why the worker's provenance report says a torch op computed forward's output, or ``None`` when it did not.

    A forward that could not be followed (it raised under the provenance mode only, or ran more ops than the mode
    follows) counts too: otherwise failing or padding that one forward would buy the check off.
    """
    if report.error:
        return f"the forward could not be followed op by op ({report.error[:200]})"
    if report.matches:
        m = report.matches[0]
        how = (
            "from forward's inputs"
            if m.how == "inputs"
            else "again once the kernels' part of its input was replaced by the known value nearest to it (what "
            "the kernels changed did not change the answer)"
        )
        return (
            f"output {m.output} agrees on {m.share:.0%} of its sampled elements with what "
            f"{m.op} computed {how}: the candidate's kernels did not compute it"
        )
    if report.truncated:
        return f"forward ran more than {report.max_ops} torch ops: where its output came from was not followed"
    return None
