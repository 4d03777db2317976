"""One evaluator contract, two implementations: the local EvaluatorPool and the RayEvaluator (local Ray, 2 CPUs).

Each test runs against both with identical assertions: verdicts and their order on a mixed batch, the
``submit``/``evaluate`` API, and per-request timeouts. Implementation-specific behaviour (a killed worker or
actor mid-batch, shipped build artifacts) is tested in test_pool.py and test_ray.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.pool import EvalRequest, EvaluatorPool
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage
from tests.integration.hazards import COMPILE_ERROR_CANDIDATE, hazard_candidate

pytestmark = pytest.mark.slow

FAST = EvalConfig(static_policy="off", run_timeout_s=30.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))
# The spinning candidate's request cap: its own stage limit (30 CPU seconds) comes later. The other tests keep the
# default request backstop (derived from FAST's stage limits): a cold cache on a loaded host (a compile-error
# candidate building its headers first at load 7) ran past a 20 s wall-clock cap as infra_error.
TIMEOUT_S = 20.0


@pytest.fixture(scope="module", params=["pool", "ray"])
def evaluator(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "pool":
        with EvaluatorPool("cpu", FAST, compile_workers=2) as pool:
            yield pool
        return
    pytest.importorskip("ray")
    import ray

    from musaenv.evaluator.ray_backend import RayEvaluator

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024**2)
    try:
        with RayEvaluator("cpu", FAST, num_executors=1) as ev:
            yield ev
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def relu() -> Any:
    return get_task("l1_relu")


def test_mixed_batch_gets_each_verdict_in_request_order(evaluator: Any, relu: Any) -> None:
    reqs = [
        EvalRequest(relu, hazard_candidate("relu_ok"), 1),
        EvalRequest(relu, "no code here", 2),
        EvalRequest(relu, hazard_candidate("relu_wrong"), 3),
        EvalRequest(relu, COMPILE_ERROR_CANDIDATE, 4),
        EvalRequest(relu, hazard_candidate("segfault"), 5),
        EvalRequest(relu, hazard_candidate("throws"), 6),
    ]
    results = evaluator.evaluate_many(reqs, progress=False)
    stages = [r.stage for r in results]
    assert stages == [Stage.CORRECT, Stage.FORMAT_ERROR, Stage.INCORRECT, Stage.COMPILE_ERROR,
                      Stage.RUNTIME_ERROR, Stage.RUNTIME_ERROR], [r.to_dict() for r in results]  # fmt: skip
    ok, _, wrong, broken, crash, throws = results
    assert ok.trials_passed == ok.trials_total == FAST.num_trials and ok.speedup is not None
    assert wrong.trials_passed == 0 and wrong.max_abs_error is not None
    assert "error" in broken.compiler_log.lower()
    assert "SIGSEGV" in crash.runtime_log
    assert "kernel exploded on purpose" in throws.runtime_log
    assert all(r.task_id == "l1_relu" and r.backend == "cpu" for r in results)


def test_submit_gives_a_future_and_evaluate_the_same_verdict(evaluator: Any, relu: Any) -> None:
    fut = evaluator.submit(relu, hazard_candidate("relu_ok"), 7)
    assert isinstance(fut, Future)
    assert fut.result().stage is Stage.CORRECT
    assert evaluator.evaluate(relu, hazard_candidate("relu_wrong"), 8).stage is Stage.INCORRECT


def test_the_default_request_limit_is_a_backstop_past_every_stage_limit(evaluator: Any) -> None:
    from musaenv.isolation.limits import backstop_s

    stages = (FAST.compile_timeout_s, FAST.load_timeout_s, FAST.run_timeout_s, FAST.timing_timeout_s)
    assert evaluator.request_timeout_s > sum(map(backstop_s, stages))


def test_a_request_past_its_time_limit_is_an_infra_error_and_the_next_one_runs(
    evaluator: Any, relu: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(evaluator, "request_timeout_s", TIMEOUT_S)  # a caller's own wall-clock cap, for the spin only
        spun = evaluator.evaluate_many([EvalRequest(relu, hazard_candidate("spin"), 9)], progress=False)[0]
    after = evaluator.evaluate(relu, hazard_candidate("relu_ok"), 10)
    assert spun.stage is Stage.INFRA_ERROR and spun.extra.get("pool_timeout"), spun.to_dict()
    assert after.stage is Stage.CORRECT, after.to_dict()
    # the spinning worker went with its executor (Ray kills a dead actor's children, the fork server first)
    deadline = time.monotonic() + 10
    while (left := _orphaned_workers()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, left


def _orphaned_workers() -> list[int]:
    """Fork-server processes of this cache directory re-parented to init: nothing of musaenv's should be."""
    mine = f"MUSAENV_CACHE_DIR={os.environ.get('MUSAENV_CACHE_DIR', '')}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd, env = Path(f"/proc/{entry}/cmdline").read_bytes(), Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in "ZX" and fields[1] == "1" and b"isolation.forkserver" in cmd and mine in env.split(b"\0"):
            found.append(int(entry))
    return found
