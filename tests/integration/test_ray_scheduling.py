"""RayEvaluator cannot deadlock: executors and prebuild tasks never starve each other, whatever the number of
executors on a 2-CPU Ray, and every wait is bounded (a request that cannot be served is an ``infra_error``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from musaenv import _env
from musaenv.config import EvalConfig, TimingConfig
from musaenv.errors import MusaEnvError
from musaenv.evaluator.pool import EvalRequest
from musaenv.evaluator.ray_artifacts import ArtifactStore
from musaenv.tasks.builtin import get_task
from musaenv.types import Stage
from tests.integration.hazards import COMPILE_ERROR_CANDIDATE, hazard_candidate

FAST = EvalConfig(static_policy="off", run_timeout_s=30.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))


def node_cache(root: Path) -> str:
    """A fresh artifact cache sharing this machine's precompiled headers (toolchain state, not artifacts), so a
    fresh cache costs one ~4 s build instead of a ~90 s cold one."""
    pch = _env.cache_dir() / "pch"
    pch.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / "pch").symlink_to(pch, target_is_directory=True)
    return str(root)


def test_artifact_store_builds_each_set_once_and_bounds_every_wait() -> None:
    store = ArtifactStore(max_entries=2)
    assert store.claim(("a",), 1.0) == (None, True)  # first caller builds
    t0 = time.monotonic()
    assert store.claim(("a",), 0.2) == (None, False)  # the builder is late: evaluate without waiting longer
    assert 0.15 < time.monotonic() - t0 < 2
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(store.claim(("a",), 10.0)))
    waiter.start()
    store.publish(("a",), "ref-a")
    waiter.join(5)
    assert got == [("ref-a", False)]
    assert store.claim(("b",), 1.0) == (None, True)
    store.publish(("b",), None)  # a failed build shares nothing: the next caller builds
    assert store.claim(("b",), 1.0) == (None, True)
    for k in ("c", "d"):
        store.claim((k,), 1.0)
        store.publish((k,), k)
    assert len(store) == 2 and store.claim(("a",), 0.0) == (None, True)  # oldest dropped


@pytest.fixture(scope="module")
def ray2() -> Iterator[Any]:
    pytest.importorskip("ray")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024**2)
    yield ray
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(400)  # a deadlock fails the test instead of hanging CI
@pytest.mark.parametrize("executors", [1, 2, 4])
def test_any_number_of_executors_finishes_on_two_cpus(ray2: Any, executors: int, tmp_path: Path) -> None:
    from musaenv.evaluator.ray_backend import RayEvaluator

    relu = get_task("l1_relu")
    env = {"MUSAENV_CACHE_DIR": node_cache(tmp_path / "actor")}
    with RayEvaluator("cpu", FAST, num_executors=executors, executor_env=env, start_timeout_s=120) as ev:
        # one CPU spare for prebuild tasks only with a single executor; otherwise the executors build and ship
        assert ev.ship == ("prebuild" if executors == 1 else "executor")
        reqs = [EvalRequest(relu, hazard_candidate("relu_ok"), s) for s in (1, 2, 3)]
        reqs += [EvalRequest(relu, COMPILE_ERROR_CANDIDATE, 4), EvalRequest(relu, hazard_candidate("relu_wrong"), 5)]
        results = ev.evaluate_many(reqs, progress=False)
    stages = [r.stage for r in results]
    assert stages == [Stage.CORRECT] * 3 + [Stage.COMPILE_ERROR, Stage.INCORRECT], [r.to_dict() for r in results]


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_an_actor_the_cluster_cannot_place_fails_fast_instead_of_hanging(ray2: Any) -> None:
    from musaenv.evaluator.ray_backend import RayEvaluator

    t0 = time.monotonic()
    with pytest.raises(MusaEnvError, match="no execution actor started"):
        RayEvaluator("cpu", FAST, executor_resources={"no_such_device": 1}, start_timeout_s=3)
    assert time.monotonic() - t0 < 60
