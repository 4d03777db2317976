"""The reference worker's judgement of a stress trial: it counts only where the reference is finite and agrees with
itself run in float64 (otherwise it measures rounding order, not the candidate's algorithm)."""

from __future__ import annotations

import torch
import torch.nn as nn

from musaenv.worker.reference import stress_skip


class _Softmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


class _Exp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


class _Cancel(nn.Module):
    """(x + 1e4) - 1e4 in the input's dtype: exact in float64, rounded to 1e-3 steps in float32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1e4) - 1e4


class _Fixed32(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(x.shape[-1], 2)  # a float32 constant: the float64 copy cannot run


def _judge(model: nn.Module, x: torch.Tensor) -> str:
    with torch.no_grad():
        return stress_skip(model, [x], [model(x)], 1e-4, 1e-4)


def test_a_finite_well_conditioned_reference_counts():
    x = torch.randn(8, 256) * 60.0 + 400.0
    assert _judge(_Softmax(), x) == ""


def test_a_reference_that_overflows_is_dropped():
    assert "not finite" in _judge(_Exp(), torch.randn(4, 16) * 60.0 + 400.0)


def test_a_reference_whose_own_rounding_takes_the_tolerance_is_dropped():
    assert "ill-conditioned" in _judge(_Cancel(), torch.randn(4, 64))


def test_a_reference_that_cannot_run_in_float64_is_dropped_not_charged():
    assert "float64" in _judge(_Fixed32(), torch.randn(4, 8))


def test_integer_outputs_need_no_conditioning():
    class Argmax(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.argmax(dim=-1)

    assert _judge(Argmax(), torch.randn(4, 8) * 60.0) == ""


def test_the_fast_tolerance_check_agrees_with_allclose():
    from musaenv.worker.reference import _close

    torch.manual_seed(0)
    b = torch.randn(64, 33, dtype=torch.float64) * 50
    cases = [b.clone(), b + 1e-6, b * (1 + 3e-5), b + 2e-4, b.neg()]
    edge = b.clone()
    edge[3, 4] = float("nan")
    cases.append(edge)
    for a in cases:
        for atol, rtol in [(1e-4, 1e-4), (2.5e-5, 2.5e-5), (0.0, 1e-5), (1e-3, 0.0)]:
            assert _close(a, b, atol, rtol) == torch.allclose(a, b, atol=atol, rtol=rtol), (atol, rtol)
    nan_ref = b.clone()
    nan_ref[0, 0] = float("nan")
    assert not _close(b, nan_ref, 1.0, 1.0)  # a NaN on either side is never close (allclose without equal_nan)
    assert _close(torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.float64), 1e-4, 1e-4)


def test_the_fast_finiteness_check_sees_every_nan_and_inf():
    from musaenv.worker.reference import _all_finite

    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        big = torch.full((1000,), torch.finfo(dtype).max, dtype=dtype)
        assert _all_finite(big)  # a sum of the largest finite values is finite in float64 (no false overflow)
        for bad in (float("nan"), float("inf"), float("-inf")):
            x = big.clone()
            x[517] = bad
            assert not _all_finite(x), (dtype, bad)
        mixed = big.clone()
        mixed[0], mixed[1] = float("inf"), float("-inf")  # inf - inf: NaN in the sum, still caught
        assert not _all_finite(mixed)
