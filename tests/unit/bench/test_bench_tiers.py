"""bench's share of samples per build path and the median build seconds of those that built (not from cache)."""

from __future__ import annotations

import pytest

from musaenv.bench.metrics import Outcome, summarize, tier_shares
from musaenv.bench.report import outcomes_from_rows, summary_markdown


def _row(sample: int, tier: str | None, builds: list[tuple[float, bool]], stage: str = "correct") -> dict:
    result = {"stage": stage, "build_tier": tier, "speedup": 1.0, "pass_fraction": 1.0,
              "extra": {"builds": [{"name": "m", "ok": True, "seconds": s, "cached": c, "tier": tier}
                                   for s, c in builds]}}  # fmt: skip
    return {"task": "t", "sample": sample, "level": 1, "result": result}


def test_build_seconds_count_the_builds_that_ran_not_cache_hits() -> None:
    outs = outcomes_from_rows([_row(0, "split", [(3.0, False), (1.0, False)]), _row(1, "split", [(1e-4, True)]),
                               _row(2, None, [])])  # fmt: skip
    assert [(o.build_tier, o.build_s) for o in outs] == [("split", 4.0), ("split", None), (None, None)]


def test_share_and_median_per_tier() -> None:
    outs = [Outcome("a", 1, "correct", build_tier="split", build_s=s) for s in (2.0, 4.0, 9.0)]
    outs += [Outcome("b", 1, "compile_error", build_tier="torch", build_s=400.0)]
    outs += [Outcome("c", 1, "correct", build_tier="split"), Outcome("d", 1, "format_error")]
    shares = tier_shares(outs)
    assert list(shares) == ["split", "none", "torch"]  # most common first, then by name
    assert shares["split"] == {"samples": 4, "share": pytest.approx(4 / 6), "built": 3, "median_build_s": 4.0}
    assert shares["torch"]["median_build_s"] == 400.0 and shares["none"]["median_build_s"] is None
    assert tier_shares([Outcome("a", 1, "correct", build_tier="pch", build_s=s) for s in (1.0, 2.0)])["pch"][
        "median_build_s"
    ] == pytest.approx(1.5)


def test_the_summary_prints_the_build_paths() -> None:
    s = summarize(outcomes_from_rows([_row(0, "split", [(3.0, False)]), _row(1, "torch", [(300.0, False)])]))
    assert s["build_tiers"]["torch"] == {"samples": 1, "share": 0.5, "built": 1, "median_build_s": 300.0}
    md = summary_markdown(s)
    assert "## Build paths" in md and "| torch | 1 | 50.0 % | 1 | 300.000 |" in md
