"""Output comparison in the parent: tolerances, NaN/Inf, shapes, dtypes, degenerate tasks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from musaenv.verification.compare import compare_outputs, fingerprints_agree, trivial_output_passes

R = np.array([1.0, -2.0, 3.0], dtype=np.float32)


def test_within_tolerance_passes_and_reports_errors():
    c = compare_outputs([R + 5e-5], [R], 1e-4, 1e-4)
    assert c.passed and c.max_abs_error is not None and c.max_abs_error < 1e-4


def test_outside_tolerance_fails_with_reason():
    c = compare_outputs([R + 1e-2], [R], 1e-4, 1e-4)
    assert not c.passed and "outside atol" in c.reason


def test_nan_is_never_a_wildcard():
    c = compare_outputs([np.array([np.nan, -2.0, 3.0], dtype=np.float32)], [R], 1e9, 1e9)
    assert not c.passed and "NaN/Inf" in c.reason


def test_reference_nan_must_be_reproduced():
    ref = np.array([np.nan, 1.0])
    assert compare_outputs([ref.copy()], [ref], 1e-4, 1e-4).passed
    assert not compare_outputs([np.array([0.0, 1.0])], [ref], 1e-4, 1e-4).passed


def test_shape_dtype_and_count_mismatches():
    assert "shape" in compare_outputs([R[:2]], [R], 1, 1).reason
    assert "dtype" in compare_outputs([R], [R], 1, 1, ["float16"], ["float32"]).reason
    assert "output(s)" in compare_outputs([R, R], [R], 1, 1).reason


def test_trivial_output_guard():
    assert trivial_output_passes([np.full(4, 1e-6)], 1e-4, 1e-4)
    assert not trivial_output_passes([R], 1e-4, 1e-4)


def _blocks(a: np.ndarray) -> list[np.ndarray]:
    """``a`` flattened in float64 and cut as the worker cuts outputs for fingerprints."""
    from musaenv.timing.timers import FINGERPRINT_BLOCKS

    r = (a.view(a.real.dtype) if np.iscomplexobj(a) else a).astype(np.float64).reshape(-1)
    blocks = max(1, min(FINGERPRINT_BLOCKS, r.size))
    per = r.size // blocks
    pieces = list(r[: blocks * per].reshape(blocks, per))
    return pieces + ([r[blocks * per :]] if r.size > blocks * per else [])


def _prints(*arrays: np.ndarray) -> list[list[list[float]]]:
    """Candidate fingerprints (per output, per block: sum, sum of squares), in float64."""
    return [[[float(b.sum()), float((b * b).sum())] for b in _blocks(a)] for a in arrays]


def _stats(*arrays: np.ndarray) -> list[list[list[float]]]:
    """Reference stats (per output, per block: sum, sum^2, sum |r|, n), in float64."""
    return [[[float(b.sum()), float((b * b).sum()), float(np.abs(b).sum()), float(b.size)] for b in _blocks(a)]
            for a in arrays]  # fmt: skip


def test_fingerprints_of_outputs_within_tolerance_always_match() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((64, 257)).astype(np.float32)
    atol = rtol = 1e-4
    worst = (ref + np.sign(rng.standard_normal(ref.shape)) * 0.99 * (atol + rtol * np.abs(ref))).astype(np.float32)
    assert compare_outputs([worst], [ref], atol, rtol).passed
    assert fingerprints_agree(_prints(worst), _stats(ref), atol, rtol)
    ints = rng.integers(-5, 5, size=100)
    assert fingerprints_agree(_prints(ints), _stats(ints), 0.0, 0.0)


def test_fingerprints_of_wrong_outputs_do_not_match() -> None:
    rng = np.random.default_rng(1)
    ref = np.maximum(rng.standard_normal((64, 257)), 0).astype(np.float32)
    stale = np.maximum(rng.standard_normal((64, 257)), 0).astype(np.float32)  # right distribution, other input
    for wrong in (np.zeros_like(ref), stale, ref * 1.01, ref[::-1] * -1):
        assert not fingerprints_agree(_prints(wrong), _stats(ref), 1e-4, 1e-4)
    assert not fingerprints_agree(_prints(ref, ref), _stats(ref), 1e-4, 1e-4)  # wrong number of outputs
    assert not fingerprints_agree([_prints(ref)[0][:-1]], _stats(ref), 1e-4, 1e-4)  # wrong number of blocks
    n_blocks = len(_blocks(ref))  # 64 x 257 elements: 64 blocks, no remainder
    assert not fingerprints_agree([[[float("nan"), 1.0]] * n_blocks], _stats(ref), 1e-4, 1e-4)
    assert not fingerprints_agree("forged", _stats(ref), 1e-4, 1e-4)
    assert fingerprints_agree(_prints(ref), [[[float("nan"), 1.0, 1.0, 3.0]] * n_blocks], 1e-4, 1e-4)  # to trials


def test_a_stale_output_of_the_same_distribution_never_passes() -> None:
    """relu of another random input, 262,144 elements (l1_relu's timing shape): one sum over the whole output
    let 2 of these 200 draws through (and one stale output in s12_late_window_py); per-block sums catch all."""
    rng = np.random.default_rng(3)
    ref = np.maximum(rng.standard_normal(1 << 18), 0).astype(np.float32)
    stats = _stats(ref)
    whole = [[[float(ref.sum()), float((ref.astype(np.float64) ** 2).sum()), float(ref.sum()), float(ref.size)]]]
    passed_whole = 0
    for _ in range(200):
        stale = np.maximum(rng.standard_normal(ref.size), 0).astype(np.float32)
        assert not fingerprints_agree(_prints(stale), stats, 1e-4, 1e-4)
        s = stale.astype(np.float64)
        passed_whole += fingerprints_agree([[[float(s.sum()), float((s * s).sum())]]], whole, 1e-4, 1e-4)
    assert passed_whole > 0  # the coarse check this replaced does let some through


def test_worker_fingerprints_of_exact_outputs_match_in_every_dtype() -> None:
    """The worker's own fingerprints (torch) of an output equal to the reference always pass the parent's check.

    fp16: 2^17 values near 1.5 sum past fp16's 65504 (the sum was inf and an honest kernel was called a cheat);
    fp32 at 2M elements with a tight tolerance: a float32 ``vector_norm`` was off by 5e-5 relative.
    """
    import torch

    from musaenv.timing.timers import output_fingerprint

    gen = torch.Generator().manual_seed(0)
    cases = [
        (torch.rand(1 << 17, generator=gen).half() * 64 + 1, 1e-3, 1e-3),  # blocks of 2048 sum past 65504
        (torch.rand(1 << 17, generator=gen).bfloat16() + 1, 1e-2, 1e-2),
        (torch.rand(1 << 21, generator=gen), 1e-7, 1e-7),
        (torch.randn(1 << 20, dtype=torch.complex64, generator=gen), 1e-6, 1e-6),
        (torch.randint(0, 1000, (1 << 16,), generator=gen), 0.0, 0.0),
        (torch.rand(1 << 10, generator=gen) * 1e30, 1e-5, 1e-5),  # squares overflow float32
        (torch.randn(1001, generator=gen), 1e-5, 1e-5),  # 64 blocks of 15 and a remainder of 41
    ]
    for out, atol, rtol in cases:
        ref = out.numpy() if out.dtype != torch.bfloat16 else out.float().numpy()
        assert fingerprints_agree(output_fingerprint(out), _stats(ref), atol, rtol), out.dtype
        assert not fingerprints_agree(output_fingerprint(out * 0), _stats(ref), atol, rtol), out.dtype


def test_reference_stats_bound_every_output_within_tolerance() -> None:
    """The reference worker's own stats (``output_fingerprint(..., reference=True)``) accept the worst honest
    output and refuse zeros, a stale input's output and a 1 % scale."""
    import torch

    from musaenv.timing.timers import output_fingerprint

    rng = np.random.default_rng(2)
    ref = np.maximum(rng.standard_normal((64, 257)), 0).astype(np.float32)
    atol = rtol = 1e-4
    stats = output_fingerprint(torch.from_numpy(ref), reference=True)
    assert len(stats[0]) == 64 and len(stats[0][0]) == 4 and sum(b[3] for b in stats[0]) == ref.size
    worst = (ref + np.sign(rng.standard_normal(ref.shape)) * 0.99 * (atol + rtol * np.abs(ref))).astype(np.float32)
    assert fingerprints_agree(output_fingerprint(torch.from_numpy(worst)), stats, atol, rtol)
    stale = np.maximum(rng.standard_normal(ref.shape), 0).astype(np.float32)
    for wrong in (np.zeros_like(ref), stale, ref * 1.01):
        assert not fingerprints_agree(output_fingerprint(torch.from_numpy(wrong)), stats, atol, rtol)
    assert not fingerprints_agree(_prints(ref, ref), stats, atol, rtol)  # wrong number of outputs
    assert not fingerprints_agree(_prints(ref), "forged", atol, rtol)


def test_a_stress_trial_forgives_a_rounding_sized_miss_only() -> None:
    """One value of 13,320 at 2.4x the tolerance (an honest kernel summing in another order, inputs scaled 84x) is
    not a failure of a stress trial; a value off by more than 10x the tolerance, non-finite values, or misses at
    more than 0.1 % of the values are, as on the task's own inputs."""
    from musaenv.verification.compare import compare_stressed

    rng = np.random.default_rng(0)
    ref = rng.standard_normal(13320).astype(np.float32)
    near = ref.copy()
    near[17] += 2.4e-4
    assert not compare_outputs([near], [ref], 1e-4, 1e-4).passed
    assert compare_stressed([near], [ref], 1e-4, 1e-4).passed
    far = ref.copy()
    far[17] += 1.7  # a one-pass variance at a large mean
    assert not compare_stressed([far], [ref], 1e-4, 1e-4).passed
    nan = ref.copy()
    nan[3] = np.nan  # exp without the max subtracted
    assert not compare_stressed([nan], [ref], 1e-4, 1e-4).passed
    many = ref.copy()
    many[:40] += 2.4e-4 * np.sign(many[:40]) + 5e-4  # 40 of 13,320 (0.3 %) just outside
    assert not compare_stressed([many], [ref], 1e-4, 1e-4).passed


def test_float32_outputs_get_the_float64_verdict_and_counts() -> None:
    """float32/float16 pairs are compared in float32 (no float64 copies): the verdict, the count of values outside
    the tolerance and the worst errors are those of the float64 comparison, for errors from far inside to far
    outside the tolerance (none of them within rounding of the bound)."""
    rng = np.random.default_rng(3)
    r = rng.standard_normal(200_000).astype(np.float32) * 10
    for scale in (1e-6, 1e-4, 3e-3, 1e-1):
        c = (r + rng.standard_normal(r.size).astype(np.float32) * scale).astype(np.float32)
        got = compare_outputs([c], [r], 1e-2, 1e-2)
        want = compare_outputs([c.astype(np.float64)], [r.astype(np.float64)], 1e-2, 1e-2)
        assert got.passed == want.passed and got.reason == want.reason
        assert got.max_abs_error == pytest.approx(want.max_abs_error, rel=1e-6)
        assert got.max_rel_error == pytest.approx(want.max_rel_error, rel=1e-5)
    half = compare_outputs([r.astype(np.float16)], [r], 1e-2, 1e-2)
    assert half.passed == compare_outputs([r.astype(np.float16).astype(np.float64)], [r.astype(np.float64)],
                                          1e-2, 1e-2).passed  # fmt: skip


def test_a_float32_error_past_the_float32_range_fails_quietly() -> None:
    big = np.array([3e38, 1.0], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning escapes either
        cmp = compare_outputs([-big], [big], 1e-2, 1e-2)
    assert not cmp.passed and "outside atol" in cmp.reason


def test_bit_equality_sees_nan_payloads_and_signed_zeros() -> None:
    from musaenv.verification.compare import bits_equal

    a = np.array([0.0, 1.0, np.nan], dtype=np.float32)
    assert bits_equal([a], [a.copy()])
    assert not bits_equal([a], [np.array([-0.0, 1.0, np.nan], dtype=np.float32)])
    other_nan = a.copy()
    other_nan.view(np.uint32)[2] ^= 1  # another NaN payload: equal as values, not as bits
    assert not bits_equal([a], [other_nan])
    assert bits_equal([np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2]], [np.array([[0, 2], [3, 5]])])
    assert not bits_equal([a], [a.astype(np.float64)])
