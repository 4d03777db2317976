"""Runtime verification, worker side: observe the candidate while it runs (imports torch; candidate worker only).

:class:`RuntimeGuard` is created before any candidate code is loaded, so the clocks, harness functions and global
settings it snapshots are the originals. It reports facts to the parent; :mod:`musaenv.verification.runtime`
judges them there. Everything here runs in the candidate's own process, so a candidate that can run arbitrary code
could also tamper with it; the static checks (introspection, monkeypatching, dynamic code) are the first line, these
probes the second (docs/verification.md says what each one can and cannot see).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import torch

from musaenv.isolation import proctree, reports
from musaenv.isolation.reports import RuntimeChecks, RuntimeReport, Tampered, Threads, TimingReport, TrialsReport
from musaenv.verification.coverage import FLOOR_POLICIES, is_allowed_aten_op
from musaenv.verification.runtime_perturb import Perturber, storage_key, tensors_in
from musaenv.verification.runtime_profile import KernelTime, profile_call
from musaenv.verification.runtime_provenance import Provenance

__all__ = ["RuntimeGuard", "global_state", "thread_count", "watch_targets"]

R = TypeVar("R", bound=RuntimeReport)

# Bound at import, before any candidate code runs: replacing time.perf_counter_ns later does not reach these.
_PERF_NS = time.perf_counter_ns
_CPU_NS = time.process_time_ns
# The trial forwards together may use at most cpu_threads + 0.5 cores' worth of CPU time before it counts as extra
# threads. Judged on their summed time, and only above 20 ms: on the development VMs one 2.6 ms single-threaded
# call measured 4.0 ms of CPU time (an additive error of about 1.3 ms per call).
_CORES_SLACK = 0.5
_CPU_FLOOR_NS = 20_000_000
REMEASURE_CALLS = 3  # re-timed with the captured clock after an unpaired timing: enough for a median
# Profiled forwards the kernel-coverage floor is judged on (musaenv.verification.coverage), under the policies that
# have one: the median of 3, because one forward's CPU times on a busy shared host moved by up to 40x between two
# runs here (a 2 MB copy read 0.2 to 9 ms of thread CPU time).
COVERAGE_RUNS = 3


def thread_count() -> int:
    """Threads of this process (``Threads:`` in ``/proc/self/status``; 0 when unreadable)."""
    try:
        return proctree.thread_count()
    except (OSError, ValueError):  # ProcessLookupError is an OSError
        return 0


def global_state() -> dict[str, Any]:
    """Process-wide settings that change speed or numerics (HACKS T9, S17)."""
    matmul = torch.backends.cuda.matmul
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "default_dtype": str(torch.get_default_dtype()),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda_matmul_allow_tf32": bool(matmul.allow_tf32),
        "cuda_matmul_fp16_reduction": bool(getattr(matmul, "allow_fp16_reduced_precision_reduction", False)),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }


def watch_targets(extra: Mapping[str, tuple[str, Any, str]] | None = None) -> dict[str, tuple[str, Any, str]]:
    """Objects whose identity must not change during an evaluation: name -> (kind, owner, attribute).

    ``kind`` is ``timer`` (T4) or ``harness`` (S20); ``owner`` is a module, class or dict. ``extra`` adds the
    caller's own harness objects (the worker adds its functions, the timing module and the channel).
    """
    watch: dict[str, tuple[str, Any, str]] = {}
    for attr in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "process_time_ns"):
        watch[f"time.{attr}"] = ("timer", time, attr)
    for attr in ("synchronize", "Event"):
        watch[f"torch.cuda.{attr}"] = ("timer", torch.cuda, attr)
    for attr in ("clone", "copy_", "numpy", "cpu", "detach", "float", "contiguous", "data_ptr", "__eq__"):
        watch[f"torch.Tensor.{attr}"] = ("harness", torch.Tensor, attr)
    for attr in ("equal", "allclose", "no_grad"):
        watch[f"torch.{attr}"] = ("harness", torch, attr)
    for attr in ("ascontiguousarray", "array_equal"):
        watch[f"numpy.{attr}"] = ("harness", np, attr)
    watch.update(extra or {})
    return watch


#: Operators the harness runs on the candidate's inputs and outputs: drawing, cloning and copying inputs, the
#: outputs' fingerprints and comparisons. A kernel the candidate registers for one of them (``torch.library``, or
#: TORCH_LIBRARY_IMPL in its extension) runs its code inside the harness's own steps, outside the timed window
#: (a clone that computes the answer while the harness copies the input; tests/adversarial/candidates_measure).
HARNESS_OPS = tuple(
    f"aten::{op}"
    for op in [
        *("clone", "copy_", "empty.memory_format", "empty_like", "empty_strided", "zeros_like", "ones_like", "full"),
        *("fill_.Scalar", "randn", "rand", "randint", "normal_", "uniform_", "random_", "_to_copy", "to.dtype"),
        *("detach", "alias", "view", "reshape", "_reshape_alias", "as_strided", "contiguous", "sum", "sum.dim_IntList"),
        *("mul.Tensor", "add.Tensor", "sub.Tensor", "abs", "isfinite", "isnan", "eq.Tensor", "ne.Tensor", "max", "min"),
        *("allclose", "equal", "cat", "stack", "select.int", "slice.Tensor", "index_select"),
    ]
)


def _dispatch_tables() -> dict[str, str]:
    """Each harness operator's dispatcher table (``torch._C._dispatch_dump``: every key's kernel and where it was
    registered); ``{}`` where this torch cannot say."""
    try:
        return {op: torch._C._dispatch_dump(op) for op in HARNESS_OPS}
    except (AttributeError, RuntimeError):
        return {}


def _lookup(owner: Any, attr: str) -> Any:
    return owner.get(attr) if isinstance(owner, Mapping) else getattr(owner, attr, None)


def _same_scalars(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two trials' non-tensor arguments (top level) are equal (values that cannot say so: not equal)."""
    try:
        scalars = [[x for x in args if not isinstance(x, torch.Tensor)] for args in (a, b)]
        return bool(scalars[0] == scalars[1])
    except (TypeError, ValueError, RuntimeError):
        return False


class RuntimeGuard:
    """Observes one candidate in its worker; create it before the candidate's code is loaded.

    Args:
        settings: The request's :class:`~musaenv.isolation.reports.RuntimeChecks` (``None``: everything off).
        device: The evaluation device.
        calls: The loader hook's :class:`~musaenv.worker.loader_hook.KernelCalls`.
        watch: Objects whose identity is checked (:func:`watch_targets`).
        count_calls: Whether counted calls prove the kernel ran (extension calls, CuPy and Triton launches are
            all counted: musaenv.worker.triton_hook); False leaves kernel calls unjudged.
    """

    def __init__(
        self,
        settings: RuntimeChecks | None,
        device: torch.device,
        calls: Any,
        watch: Mapping[str, tuple[str, Any, str]],
        count_calls: bool = True,
    ) -> None:
        s = settings or RuntimeChecks()
        self.policy, self.tol, self.checks = s.policy, (s.atol, s.rtol), s.checks
        self.device, self.calls, self.count_calls = device, calls, count_calls
        # A name the candidate cannot guess, so it cannot open a range of its own that reads as kernel time.
        self.span = f"musaenv::kernel_call#{secrets.token_hex(8)}"
        self.cpu_threads = torch.get_num_threads()
        self._sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self._watch = dict(watch)
        self._ids = {name: _lookup(owner, attr) for name, (_, owner, attr) in self._watch.items()}
        self._ops = _dispatch_tables()
        self._state = global_state()
        if self.checks or self.policy != "off":
            self._warm()
        self.preflight_ok = self.policy != "off" and profile_call(self._tiny_op, device)[1].ok
        self.thread_base = thread_count()
        self.max_threads = self.thread_base
        self.trial_calls: list[int] = []
        self.first_out_bytes: list[int] = []
        self._busy_ns = [0, 0]  # CPU time and wall time of the trial forwards
        self._mark = self._cpu0 = self._wall0 = 0

    def _tiny_op(self) -> Any:
        return torch.zeros(4, device=self.device).add_(1)

    def _warm(self) -> None:
        """Start what torch starts lazily (intra-op pool, CUDA context) so the thread baseline includes it."""
        torch.ones(1 << 21).sum()  # above the parallel grain size, so the OpenMP team is created if threads > 1
        if self.device.type == "cuda":
            self._tiny_op()
            self._sync()

    def _observe_threads(self) -> None:
        self.max_threads = max(self.max_threads, thread_count())

    def before_call(self) -> None:
        """Mark the start of one forward call."""
        self._mark, self._cpu0, self._wall0 = self.calls.count, _CPU_NS(), _PERF_NS()

    def after_call(self, outs: Sequence[Any]) -> None:
        """Record one finished (and synchronised) forward call."""
        wall, cpu = _PERF_NS() - self._wall0, _CPU_NS() - self._cpu0
        self.trial_calls.append(self.calls.count - self._mark)
        if len(self.trial_calls) == 1:
            self.first_out_bytes = [o.numel() * o.element_size() for o in outs if type(o) is torch.Tensor]
        self._observe_threads()
        self._busy_ns[0] += cpu
        self._busy_ns[1] += wall

    def _core_overuse(self) -> list[str]:
        cpu, wall = self._busy_ns
        if self.device.type != "cpu" or wall < _CPU_FLOOR_NS or cpu <= wall * (self.cpu_threads + _CORES_SLACK):
            return []
        return [f"{cpu / wall:.1f} cores busy during the trial forwards ({self.cpu_threads} allowed)"]

    def _tampered(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"timer": [], "harness": []}
        for name, (kind, owner, attr) in self._watch.items():
            if _lookup(owner, attr) is not self._ids[name]:
                out[kind].append(name)
        now = _dispatch_tables() if self._ops else {}
        out["harness"] += [f"the dispatcher's kernels for {op}" for op, table in now.items() if table != self._ops[op]]
        return out

    def _with_facts(self, report: R) -> R:
        """``report`` with the fields both phases carry (:class:`RuntimeReport`'s), as observed now."""
        self._observe_threads()
        now = global_state()
        return replace(
            report,
            device_type=self.device.type,
            threads=Threads(self.thread_base, self.max_threads, self._core_overuse()),
            global_state=[f"{k}: {v} -> {now[k]}" for k, v in self._state.items() if now.get(k) != v],
            tampered=Tampered(**self._tampered()),
        )

    def _poison(self, nbytes: Sequence[int]) -> None:
        """Fill blocks the size of trial 1's outputs with 0xFF (NaN / -1) and free them, for a repeat to land on."""
        blocks = [torch.full((max(n, 1),), 255, dtype=torch.uint8, device=self.device) for n in nbytes]
        self._sync()
        del blocks

    def extra_runs(
        self,
        model: Any,
        make_args: Callable[[], list[Any]],
        to_array: Callable[..., Any],
        rewrite: tuple[int, Callable[[], list[Any]]] | None = None,
    ) -> tuple[TrialsReport | None, list[Any]]:
        """The profiled, poisoned repeat of trial 1, the perturbed run and, given ``rewrite`` (a later trial of the
        same shape and its inputs), the rewrite run (:meth:`_rewritten`); returns the ``trials`` report (``None``:
        nothing is checked) and its arrays."""
        if self.policy == "off" and not self.checks:
            return None, []
        self._poison(self.first_out_bytes if self.checks else ())
        args = make_args()
        mark = self.calls.count
        profile: reports.ProfileReport | None = None
        with torch.no_grad():
            if self.policy != "off":
                outs, profile = self._profiled(lambda: model(*args))
            else:
                outs = model(*args)
        self._sync()
        repeat_calls = self.calls.count - mark
        if profile is not None and self.policy in FLOOR_POLICIES:
            profile = replace(profile, runs=self._coverage_runs(model, make_args))
        report = TrialsReport(profile=profile, repeat_calls=repeat_calls)
        if self.policy != "off" and _torch_compute_seen(profile):
            report = replace(report, provenance=self._provenance(model, make_args))
        arrays: list[Any] = []
        if self.checks:
            arrays = [to_array(t) for t in _flat_outputs(outs)]
            pert, note = self._perturbed(model, make_args, to_array)
            report = replace(report, repeat_outputs=len(arrays), perturb_outputs=len(pert), perturb_note=note)
            arrays.extend(pert)
            if rewrite is not None:
                again, note = self._rewritten(model, make_args, rewrite[1], to_array)
                arrays.extend(again)
                n, later = len(again) // 2, rewrite[0]
                report = replace(report, rewrite_outputs=n, rewrite_calls=2, rewrite_trial=later, rewrite_note=note)
            counted = list(self.trial_calls) if self.count_calls else None
            report = self._with_facts(replace(report, kernel_calls=counted))
        return report, arrays

    def _profiled(self, call: Callable[[], Any]) -> tuple[Any, reports.ProfileReport]:
        """``call`` profiled, every call into the candidate's kernels timed (:class:`KernelTime`)."""
        kernels = KernelTime(self.span)
        self.calls.span = kernels
        try:
            outs, profile = profile_call(call, self.device, kernels)
        finally:
            self.calls.span = None
        return outs, replace(profile, preflight_ok=self.preflight_ok)

    def _coverage_runs(self, model: Any, make_args: Callable[[], list[Any]]) -> list[reports.ProfileRun]:
        """More profiled forwards for the kernel-coverage floor (the parent takes the median run)."""
        runs = []
        for _ in range(COVERAGE_RUNS - 1):
            args = make_args()
            with torch.no_grad():
                _, profile = self._profiled(lambda a=args: model(*a))  # type: ignore[misc]
            self._sync()
            runs.append(profile.coverage_run())
        return runs

    def _provenance(self, model: Any, make_args: Callable[[], list[Any]]) -> reports.ProvenanceReport:
        """One more forward of trial 1 under :class:`Provenance`: which torch op, if any, computed the output."""
        args = make_args()
        weights = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
        t0 = _PERF_NS()
        try:
            mode = Provenance([*args, *weights], *self.tol)
            with torch.no_grad(), mode:
                outs = model(*args)
            self._sync()
            return mode.report(_flat_outputs(outs), wall_ms=round((_PERF_NS() - t0) / 1e6, 3))
        except Exception as e:  # it ran before without the mode: reported, and judged in the parent
            return reports.ProvenanceReport(error=f"{type(e).__name__}: {str(e)[:300]}")

    def _perturbed(
        self, model: Any, make_args: Callable[[], list[Any]], to_array: Callable[..., Any]
    ) -> tuple[list[Any], str]:
        per_call = self.trial_calls[0] if self.trial_calls else 0
        if not self.count_calls or per_call <= 0:
            return [], "skipped: no counted extension call in trial 1"
        args = make_args()
        weights = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
        hook = Perturber(self.calls.count + per_call, {storage_key(t) for t in [*tensors_in(args), *weights]})
        self.calls.hook = hook
        try:
            with torch.no_grad():
                outs = model(*args)
            self._sync()
            # Copies: the arrays may share memory with tensors that restore() is about to overwrite.
            arrays = [np.array(to_array(t), copy=True) for t in _flat_outputs(outs)] if hook.hit else []
        except Exception as e:  # garbage fed onwards may make later code raise: the output did depend on it
            return [], f"the perturbed forward raised {type(e).__name__} (the output depends on the kernel)"
        finally:
            self.calls.hook = None
            hook.restore()
        return arrays, f"overwrote {hook.hit} tensor(s) of extension call {per_call} of {per_call}"

    def _rewritten(
        self, model: Any, make_args: Callable[[], list[Any]], make_other: Callable[[], list[Any]],
        to_array: Callable[..., Any],
    ) -> tuple[list[Any], str]:  # fmt: skip
        """Run trial 1's inputs, write another trial's values into the *same* tensors, run again; both outputs are
        sent, each must be its own trial's. A cache keyed on address (``data_ptr``, ``id``) or buffer identity answers
        one with an older output (HACKS S11), also when these tensors get an earlier trial's block. Never sampled."""
        args = make_args()
        with torch.no_grad():
            first = [np.array(to_array(t), copy=True) for t in _flat_outputs(model(*args))]
            other = make_other()
            mine, theirs = list(tensors_in(args)), list(tensors_in(other))
            if len(mine) != len(theirs) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(mine, theirs)):
                return [], "skipped: the other trial's inputs differ in shape"
            if not _same_scalars(args, other):  # its reference is for its own scalars, which stay trial 1's here
                return [], "skipped: the other trial's non-tensor inputs differ"
            for a, b in zip(mine, theirs):
                a.copy_(b)
            outs = model(*args)
        self._sync()
        return [*first, *(np.array(to_array(t), copy=True) for t in _flat_outputs(outs))], "rewrote the inputs in place"

    def start_timing(self) -> None:
        """Mark the start of the timing phase."""
        self._mark = self.calls.count

    def finish_timing(
        self, model: Any, pool: Sequence[Sequence[Any]], timed_calls: int, flush_bytes: int, repeats: int
    ) -> TimingReport | None:
        """Re-measure a few calls of ``pool`` (none if empty: paired timing, the parent clocked every call) with the
        captured clock; return the ``timing`` report (``None``: checks off)."""
        if not self.checks:
            return None
        samples = self._remeasure(model, pool, flush_bytes, min(REMEASURE_CALLS, max(repeats, 1))) if pool else []
        return self._with_facts(
            TimingReport(
                remeasure_ms=samples,
                forward_calls=timed_calls + len(samples),
                kernel_calls=(self.calls.count - self._mark) if self.count_calls else None,
            )
        )

    def _remeasure(self, model: Any, pool: Sequence[Sequence[Any]], flush_bytes: int, n: int) -> list[float]:
        """Same protocol as the timer (fresh clone, cache flush, synchronised host time), untouchable clock."""
        flush = torch.empty(max(flush_bytes // 4, 1), device=self.device) if flush_bytes else None
        samples: list[float] = []
        with torch.no_grad():
            for i in range(n):
                args = [a.clone() if isinstance(a, torch.Tensor) else a for a in pool[i % len(pool)]]
                if flush is not None:
                    flush.fill_(float(i))
                self._sync()
                t0 = _PERF_NS()
                model(*args)
                self._sync()
                samples.append((_PERF_NS() - t0) / 1e6)
        return samples


def _torch_compute_seen(profile: reports.ProfileReport | None) -> bool:
    """Whether the profiled forward dispatched aten compute outside the plumbing allowlist (or could not say)."""
    if profile is None or not profile.ok:
        return True
    return any(n.startswith("aten::") and not is_allowed_aten_op(n) for n in profile.dispatched)


def _flat_outputs(out: Any) -> list[torch.Tensor]:
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o for o in items if type(o) is torch.Tensor]
