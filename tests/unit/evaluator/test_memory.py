"""The candidate's memory budget comes from its task: 3 GiB of ballast beside an l1_relu kernel is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.evaluator.memory import candidate_budget_mb, host_share_mb
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.types import Stage

pytestmark = pytest.mark.slow

CFG = EvalConfig(num_trials=2, timing=TimingConfig(warmup=1, repeats=3, max_time_s=0.3))


@pytest.fixture(scope="module")
def ev() -> Iterator[LocalEvaluator]:
    e = LocalEvaluator("cpu", CFG)
    yield e
    e.close()


def test_budget_arithmetic() -> None:
    share = host_share_mb()
    assert share > 0
    assert candidate_budget_mb(None, 600.0, 4.0, 2048, 16384) == min(16384, share)  # no peak yet: the bound
    assert candidate_budget_mb(10.0, 600.0, 4.0, 2048, 1_000_000) == min(600 + 40 + 2048, share)
    assert candidate_budget_mb(10.0, 600.0, 4.0, 2048, 1000) == min(1000, share)


def test_ballast_is_refused_once_the_reference_was_measured(ev: LocalEvaluator) -> None:
    honest = solution_source("l1_relu", "cpu")
    first = ev.evaluate(get_task("l1_relu"), honest, seed=1)
    assert first.stage is Stage.CORRECT, first.to_dict()
    ballast = honest.replace(
        "        super().__init__()", "        super().__init__()\n        self.b = bytearray(3 << 30)", 1
    )
    assert ballast != honest
    r = ev.evaluate(get_task("l1_relu"), ballast, seed=2)
    assert r.stage is Stage.RUNTIME_ERROR, r.to_dict()
    assert r.extra["memory"]["reference_peak_mb"] is not None
    assert any("out of memory" in m and "memory_factor" in m for m in r.messages), r.messages
    again = ev.evaluate(get_task("l1_relu"), honest, seed=3)  # the honest kernel fits its derived budget
    assert again.stage is Stage.CORRECT, again.to_dict()
    assert again.extra["memory"]["address_space_mb"] < 4096, again.extra["memory"]


def test_oom_kills_reads_the_kernels_counter():
    from pathlib import Path

    from musaenv.evaluator.memory import oom_kills

    if "oom_kill " not in Path("/proc/vmstat").read_text():
        pytest.skip("this kernel does not count OOM kills (Linux < 4.13)")
    n = oom_kills()
    assert isinstance(n, int) and n >= 0
