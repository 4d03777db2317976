"""Kernel coverage: time in the candidate's own kernels against forbidden torch compute, and the floor under the
non-strict policies (musaenv.verification.coverage, runtime._profile_findings, the worker's kernel ranges)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from musaenv.isolation.reports import (
    KernelTimes,
    OpTime,
    ProfileReport,
    ProfileRun,
    RuntimeChecks,
    RuntimeReports,
    TrialsReport,
)
from musaenv.verification.coverage import KERNEL_COVERAGE_FLOOR, forbidden_ops, kernel_coverage
from musaenv.verification.runtime import RuntimeSettings, assess_runtime
from musaenv.verification.runtime_probe import RuntimeGuard
from musaenv.worker.loader_hook import KernelCalls

TOL = (1e-4, 1e-4)


def _profile(kernel_us: float, cpu: dict[str, tuple[float, float]], **more: Any) -> ProfileReport:
    """A worker profile: the kernels' CPU time, and per op [CPU us, CPU us inside kernel calls]; the profiler saw
    the same ops as outermost ops."""
    ops = [OpTime(n, 1, v[0]) for n, v in cpu.items()]
    return ProfileReport(ok=True, wall_us=10_000.0, ops=ops, kernel=KernelTimes(1, kernel_us, 0.0),
                         op_cpu_us={n: list(v) for n, v in cpu.items()}, **more)  # fmt: skip


def _judge(profile: ProfileReport, policy: str) -> Any:
    ref = [[np.ones((2, 2), np.float32)]]
    report = RuntimeReports(trials=TrialsReport(profile=profile))
    return assess_runtime(report, [], ref, ref, [True], TOL, RuntimeSettings(policy, checks=False))


def test_a_copy_kernel_next_to_the_reference_op_is_refused_under_kernelbench() -> None:
    # The case: the old figure, 1 - 900 / 10000 = 0.91, read as well covered; own time says 0.1.
    profile = _profile(100.0, {"aten::_softmax": (900.0, 0.0), "aten::empty_like": (5.0, 0.0)})
    cov = kernel_coverage(profile)
    assert cov.ratio == pytest.approx(0.1) and cov.basis == "host" and cov.below()
    out = _judge(profile, "kernelbench")
    assert out.flags == ["low_kernel_coverage"] and out.warnings == ["forbidden_aten_op"]
    assert out.extra["coverage"]["kernel"] == pytest.approx(0.1)
    assert "10% of the compute time" in out.messages[-1]
    assert _judge(profile, "strict").flags == ["forbidden_aten_op"]  # every forbidden op is refused there already
    permissive = _judge(profile, "permissive")  # reports the figure, refuses nothing
    assert permissive.flags == [] and permissive.extra["coverage"]["kernel"] == pytest.approx(0.1)


def test_the_median_of_the_profiled_forwards_counts() -> None:
    # One forward the host slowed down in the middle (the kernel read 20x its time) decides nothing.
    runs = [ProfileRun(True, KernelTimes(1, k, 0.0), {"aten::_softmax": [900.0, 0.0]}) for k in (18_000.0, 110.0)]
    profile = _profile(100.0, {"aten::_softmax": (900.0, 0.0)}, runs=runs)
    assert kernel_coverage(profile).own_kernel_us == pytest.approx(110.0)
    assert _judge(profile, "kernelbench").flags == ["low_kernel_coverage"]


def test_a_kernel_doing_the_work_beside_a_small_torch_op_passes() -> None:
    profile = _profile(1000.0, {"aten::amax": (50.0, 0.0)})
    out = _judge(profile, "kernelbench")
    assert out.flags == [] and out.warnings == ["forbidden_aten_op"]
    assert out.extra["coverage"]["kernel"] == pytest.approx(1000 / 1050, abs=1e-4)
    assert _judge(_profile(1000.0, {}), "kernelbench").flags == []  # no torch compute: nothing to judge


def test_torch_compute_called_from_inside_the_kernel_is_not_kernel_time() -> None:
    # The extension's C++ calls at::softmax (900 us of its 1000 us): 100 us of its own against 900 of torch's.
    profile = _profile(1000.0, {"aten::_softmax": (900.0, 900.0)})
    cov = kernel_coverage(profile)
    assert cov.own_kernel_us == pytest.approx(100.0) and cov.ratio == pytest.approx(0.1)
    assert _judge(profile, "kernelbench").flags == ["low_kernel_coverage"]


def test_device_times_decide_where_the_profile_has_them() -> None:
    profile = _profile(10.0, {"aten::mm": (2.0, 0.0)}, device_total_us=400.0)
    profile = replace(profile, kernel=KernelTimes(1, 10.0, 100.0), ops=[OpTime("aten::mm", 1, 2.0, 300.0)])
    cov = kernel_coverage(profile)
    assert cov.basis == "device" and cov.ratio == pytest.approx(0.25)


def test_hidden_compute_and_a_broken_profile_are_refused_under_kernelbench() -> None:
    hidden = _profile(1000.0, {}, dispatched=["aten::softmax"], seen=[])
    assert _judge(hidden, "kernelbench").flags == ["low_kernel_coverage"]
    broken = ProfileReport(ok=False, error="profiler already running", preflight_ok=True)
    assert _judge(broken, "kernelbench").flags == ["profile_unavailable"]
    assert _judge(replace(broken, preflight_ok=False), "kernelbench").flags == []  # the machine's, not the candidate's


def test_unknown_kernel_time_refuses_nothing() -> None:
    profile = _profile(0.0, {"aten::_softmax": (900.0, 0.0)})
    cov = kernel_coverage(replace(profile, kernel=None))
    assert cov.ratio is None and not cov.below()
    assert 0.0 < KERNEL_COVERAGE_FLOOR < 1.0


class _Parity(torch.nn.Module):
    """The issue's cheat on a real profile: torch.softmax does the work, a counted "kernel" copies its result."""

    def __init__(self, copy: Any) -> None:
        super().__init__()
        self.copy = copy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.copy(torch.softmax(x, dim=1))


class _Kernel(torch.nn.Module):
    """Forward is one counted "kernel" call."""

    def __init__(self, kernel: Any) -> None:
        super().__init__()
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x)


def _own_work(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()  # plumbing (allowed), repeated so that the "kernel" takes measurable time of its own
    for _ in range(20):
        out.copy_(x)
    return out


def _guard_profile(model_of: Any) -> ProfileReport:
    calls = KernelCalls()
    guard = RuntimeGuard(RuntimeChecks("kernelbench", checks=False), torch.device("cpu"), calls, {})
    model = model_of(calls)
    x = torch.randn(256, 2048)
    report, _ = guard.extra_runs(model, lambda: [x.clone()], lambda t: t.numpy())
    assert calls.span is None  # kernel calls are timed only while a forward is profiled
    assert report is not None and report.profile is not None
    profile = report.profile
    assert report.repeat_calls == 1  # counted on the poisoned repeat alone, not on the coverage runs
    assert profile.ok and len(profile.runs) == 2  # median of 3 forwards under kernelbench
    for run in [profile, *profile.runs]:
        assert run.kernel is not None and run.kernel.calls == 1 and run.kernel.cpu_us > 0
    assert not any(name.startswith("musaenv::kernel_call") for name in profile.seen)
    return profile


def test_the_worker_times_its_counted_calls_in_the_profile() -> None:
    cheat = _guard_profile(lambda calls: _Parity(calls.wrap(lambda t: t.clone())))
    assert cheat.op_cpu_us["aten::_softmax"][0] > 0 and cheat.op_cpu_us["aten::_softmax"][1] == 0
    assert kernel_coverage(cheat).forbidden_torch_us > 0
    # torch.softmax inside the counted call: its time is torch's, not the kernel's
    inside = _guard_profile(lambda calls: _Kernel(calls.wrap(lambda t: torch.softmax(t, dim=1))))
    assert inside.op_cpu_us["aten::_softmax"][1] == inside.op_cpu_us["aten::_softmax"][0] > 0
    assert forbidden_ops(inside.ops) and kernel_coverage(inside).below()
    own = _guard_profile(lambda calls: _Kernel(calls.wrap(_own_work)))
    assert kernel_coverage(own).ratio == 1.0
