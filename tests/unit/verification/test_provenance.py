"""Which op computed forward's output (musaenv.verification.runtime_provenance, coverage.torch_computed, the
``torch_computed_output`` flag): judged by value, so padding a kernel with busy work buys nothing.

The "kernels" here run in numpy on the tensors' memory, as a compiled extension does: the dispatch mode never sees
what they compute, only the torch ops around them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from musaenv.isolation.records import ProtocolError
from musaenv.isolation.reports import Match, ProvenanceReport, RuntimeChecks, RuntimeReports, TrialsReport
from musaenv.verification.coverage import torch_computed
from musaenv.verification.runtime import RuntimeSettings, assess_runtime
from musaenv.verification.runtime_probe import RuntimeGuard
from musaenv.verification.runtime_provenance import MAX_OPS, Provenance
from musaenv.worker.loader_hook import KernelCalls

TOL = (1e-4, 1e-4)


def _kernel(fn: Callable[..., np.ndarray]) -> Callable[..., torch.Tensor]:
    """A "compiled kernel": numpy on the tensors' memory, invisible to the dispatcher."""

    def call(*tensors: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(fn(*(t.numpy() for t in tensors)), dtype=np.float32))

    return call


def _softmax_np(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


copy = _kernel(lambda a: a.copy())
relu = _kernel(lambda a: np.maximum(a, 0))
softmax_kernel = _kernel(_softmax_np)
rewrite_few = _kernel(lambda a: np.where(np.arange(a.size).reshape(a.shape) % 50 == 0, 0.5, a))  # 2 % of them


def _padded_copy(a: torch.Tensor) -> torch.Tensor:
    out = a
    for _ in range(12):  # busy work: twelve copies, the time share a padded kernel buys
        out = copy(out)
    return out


def _follow(forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    torch.manual_seed(0)
    x, b = torch.randn(64, 512), torch.randn(512)
    mode = Provenance([x, b], *TOL)
    with torch.no_grad(), mode:
        out = forward(x, b)
    return mode.report([out])


def _how(report: dict[str, Any]) -> str | None:
    return report.matches[0].how if report.matches else None


CHEATS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "copy of torch's answer": lambda x, b: copy(torch.softmax(x, 1)),
    "padded copy (12 passes)": lambda x, b: _padded_copy(torch.softmax(x, 1)),
    "torch on a kernel's copy of the input": lambda x, b: copy(torch.softmax(copy(x), 1)),
    "torch on the input plus a kernel's zeros": lambda x, b: copy(torch.softmax(x + copy(torch.zeros_like(x)), 1)),
    "torch's answer, a few elements rewritten": lambda x, b: rewrite_few(torch.softmax(x, 1)),
    "torch's answer transposed by the kernel": lambda x, b: _kernel(lambda a: a.T.copy())(torch.softmax(x, 1)),
    "torch on a transposed copy": lambda x, b: copy(torch.softmax(_kernel(lambda a: a.T.copy())(x), 0).T),
    "answer written into an empty buffer": lambda x, b: _write_into(torch.empty_like(x), torch.softmax(x, 1)),
}


def _write_into(buf: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    buf.numpy()[...] = value.numpy()  # the kernel writes through the pointer: no dispatcher op
    return buf


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_an_output_torch_computed_from_the_inputs_is_found(name: str) -> None:
    report = _follow(CHEATS[name])
    assert _how(report) == "inputs", report
    assert report.matches[0].op == "aten::_softmax" and report.matches[0].share >= 0.9


def test_a_kernel_that_perturbs_the_input_below_the_tolerance_is_replayed_out() -> None:
    # softmax's outputs (~2e-3) sit far below atol: logits moved by 0.05 still give a correct answer. The input torch
    # read is not a known value, but running the op again on the input itself gives the same answer.
    nudge = _kernel(lambda a: a + np.float32(0.05) * np.sign(a))
    report = _follow(lambda x, b: copy(torch.softmax(nudge(x), 1)))
    assert report.from_inputs == 0 and _how(report) == "replay", report


def _softmax_in_four_ops(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.amax(dim=1, keepdim=True))
    return e / e.sum(dim=1, keepdim=True)


def test_a_chain_of_torch_ops_on_a_nudged_input_is_replayed_back_to_the_input() -> None:
    # The kernel nudges the input (not a known value any more), torch spells softmax in four ops on it, a kernel
    # copies the answer: the chain replayed from the input itself gives the answer again.
    nudge = _kernel(lambda a: a + np.float32(0.03) * np.sign(a))
    report = _follow(lambda x, b: _padded_copy(_softmax_in_four_ops(nudge(x))))
    assert report.from_inputs == 0 and _how(report) == "replay", report
    assert report.matches[0].op == "aten::div"


HONEST: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "torch's softmax chain on a kernel's result": lambda x, b: _softmax_in_four_ops(relu(x)),
    "a kernel writes torch's buffer, torch finishes": lambda x, b: _kernel_fills_then_torch(x),
    "kernel then torch op on its output": lambda x, b: torch.add(relu(x), b),
    "kernel then torch ReLU": lambda x, b: torch.relu(_kernel(lambda a, c: a * 2.0 + c)(x, b)),
    "two kernels, torch takes one number per row": lambda x, b: _two_kernels(x),
    "the kernel does it all": lambda x, b: softmax_kernel(x),
    "torch on the input, a kernel epilogue": lambda x, b: relu(torch.mul(x, 3.0)),
}


def _kernel_fills_then_torch(x: torch.Tensor) -> torch.Tensor:
    buf = torch.zeros_like(x)  # torch made it (zeros: a known value); the kernel then writes its result into it
    buf.numpy()[...] = np.maximum(x.numpy(), 0) * 2.0
    return torch.sub(buf, 1.0)


def _two_kernels(x: torch.Tensor) -> torch.Tensor:
    sums = torch.empty(x.shape[0], 1)
    e = _kernel(lambda a: np.exp(a - a.max(axis=1, keepdims=True)))(x)
    sums.numpy()[...] = e.numpy().sum(axis=1, keepdims=True)  # written by the kernel into torch's buffer
    return _kernel(lambda a, r: a * r)(e, torch.reciprocal(sums))


@pytest.mark.parametrize("name", sorted(HONEST))
def test_kernels_that_do_the_work_are_not_matched(name: str) -> None:
    report = _follow(HONEST[name])
    assert report.matches == [], report
    assert not report.truncated


def test_the_reference_op_run_beside_an_exact_kernel_is_matched() -> None:
    # The documented decision: torch.relu(x) ran on forward's input and equals the output; which of the two equal
    # values forward returned cannot be told apart, and running the reference op beside the kernel is refused.
    report = _follow(lambda x, b: (torch.relu(x), relu(x))[1])
    assert _how(report) == "inputs" and report.matches[0].op == "aten::relu"


def test_padding_forward_with_ops_does_not_buy_it_out_of_the_check() -> None:
    def padded(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        for _ in range(MAX_OPS):
            x = x.view(x.shape)
        return copy(torch.softmax(x, 1))

    report = _follow(padded)
    assert report.truncated and report.matches == []
    assert "more than 4096 torch ops" in (torch_computed(report) or "")


def _judge(provenance: ProvenanceReport, policy: str) -> Any:
    ref = [[np.ones((2, 2), np.float32)]]
    report = RuntimeReports(trials=TrialsReport(provenance=provenance))
    return assess_runtime(report, [], ref, ref, [True], TOL, RuntimeSettings(policy, checks=False))


def test_the_flag_is_an_error_under_strict_and_kernelbench_and_reported_under_permissive() -> None:
    found = ProvenanceReport(ops=3, forbidden=1, from_inputs=1, max_ops=MAX_OPS,
                             matches=[Match(0, "aten::_softmax", 1.0, "inputs")])  # fmt: skip
    for policy in ("kernelbench", "strict"):
        out = _judge(found, policy)
        assert out.flags == ["torch_computed_output"], out.messages
        assert "aten::_softmax computed from forward's inputs" in out.messages[0]
    permissive = _judge(found, "permissive")
    assert permissive.flags == [] and permissive.warnings == ["torch_computed_output"]
    assert _judge(found, "off").flags == []
    clean = replace(found, matches=[])
    assert _judge(clean, "kernelbench").flags == []
    assert _judge(ProvenanceReport(error="RuntimeError: boom"), "kernelbench").flags == ["torch_computed_output"]


class _Cheat(torch.nn.Module):
    def __init__(self, kernel: Any) -> None:
        super().__init__()
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(torch.softmax(x, dim=1))


class _Honest(torch.nn.Module):
    def __init__(self, kernel: Any) -> None:
        super().__init__()
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x)


@pytest.mark.parametrize("policy", ["kernelbench", "strict"])
def test_the_worker_follows_a_forward_only_when_it_ran_torch_compute(policy: str) -> None:
    x = torch.randn(32, 256)
    for model_of, expected in ((_Cheat, 1), (_Honest, None)):
        calls = KernelCalls()
        guard = RuntimeGuard(RuntimeChecks(policy, checks=False, atol=1e-4, rtol=1e-4),
                             torch.device("cpu"), calls, {})  # fmt: skip
        model = model_of(calls.wrap(_kernel(_softmax_np) if model_of is _Honest else copy))
        report, _ = guard.extra_runs(model, lambda: [x.clone()], lambda t: t.numpy())
        if expected is None:
            assert report is not None and report.provenance is None  # no torch compute: nothing followed
        else:
            assert report is not None and report.provenance is not None
            assert len(report.provenance.matches) == expected, report.provenance


def test_elements_within_the_tolerance_of_zero_prove_nothing() -> None:
    # softmax of 4 randn + 100 (the built-in task's input) is below fp32's atol almost everywhere, and so is
    # exp(x - max): agreeing there says nothing about who computed the answer. Zeros match nothing either.
    torch.manual_seed(1)
    x = torch.randn(64, 512) * 4.0 + 100.0
    mode = Provenance([x], *TOL)
    with torch.no_grad(), mode:
        torch.exp(x - x.amax(dim=1, keepdim=True))  # torch's, from the input, not the answer
        torch.mul(x, 0.0)
        out = softmax_kernel(x)
        zeros = _kernel(np.zeros_like)(x)
    assert mode.report([out, zeros]).matches == []


def test_a_provenance_report_is_refused_at_decoding_when_malformed() -> None:
    match_ = Match(0, "aten::mm", 1.0, "inputs")
    found = ProvenanceReport(ops=3, forbidden=1, from_inputs=1, max_ops=MAX_OPS, matches=[match_])
    sent = TrialsReport(provenance=found).to_dict()
    assert TrialsReport.from_dict(sent).provenance == found
    match = sent["provenance"]["matches"][0]
    for forged in (
        {**sent["provenance"], "matches": [{**match, "share": "all"}]},
        {**sent["provenance"], "matches": [{k: v for k, v in match.items() if k != "op"}]},
        {**sent["provenance"], "matches": ["aten::mm"]},
        {**sent["provenance"], "truncated": "no"},
        {**sent["provenance"], "why": "surplus"},
        [found.to_dict()],
    ):
        with pytest.raises(ProtocolError):
            TrialsReport.from_dict({**sent, "provenance": forged})
