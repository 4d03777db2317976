"""RayEvaluator across two nodes simulated on one machine (``ray.cluster_utils.Cluster``), each node with an
artifact cache of its own: every build set is compiled once in the cluster and shipped to the other node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from musaenv.evaluator.pool import EvalRequest
from musaenv.evaluator.ray_artifacts import build_names, extract_build_specs
from musaenv.tasks.builtin import get_task
from musaenv.tasks.parsing import extract_candidate
from musaenv.types import Stage
from tests.integration.hazards import hazard_candidate
from tests.integration.test_ray_scheduling import FAST, node_cache

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(400)]


def _cluster(tmp: Path, head_cpus: int) -> Iterator[tuple[Any, list[Path]]]:
    pytest.importorskip("ray")
    import ray
    from ray.cluster_utils import Cluster

    caches = [Path(node_cache(tmp / f"node{i}")) for i in range(2)]
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": head_cpus, "env_vars": {"MUSAENV_CACHE_DIR": str(caches[0])},
        "object_store_memory": 150 * 1024**2})  # fmt: skip
    cluster.add_node(num_cpus=1, env_vars={"MUSAENV_CACHE_DIR": str(caches[1])}, object_store_memory=150 * 1024**2)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield ray, caches
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(params=[1, 2], ids=["executors-build", "prebuild-task"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, list[Path]]]:
    yield from _cluster(tmp_path, head_cpus=request.param)


def test_each_build_is_done_once_and_shipped_to_the_other_node(cluster: tuple[Any, list[Path]]) -> None:
    from musaenv.evaluator.ray_backend import RayEvaluator

    ray, caches = cluster
    relu = get_task("l1_relu")
    response = hazard_candidate("relu_ok")
    code = extract_candidate(response, FAST.max_response_chars).code
    assert code is not None
    (name,) = build_names(extract_build_specs(code, "cpu"))
    with RayEvaluator("cpu", FAST, num_executors=2, start_timeout_s=120) as ev:
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(nodes) == 2
        # 2 executors on 2 CPUs: they build themselves; on 3 CPUs one is spare for a prebuild task
        expected = "prebuild" if ray.cluster_resources()["CPU"] >= 3 else "executor"
        assert ev.ship == expected
        results = ev.evaluate_many([EvalRequest(relu, response, s) for s in range(6)], progress=False)
        stats = dict(ev.stats)
    assert all(r.stage is Stage.CORRECT for r in results), [r.to_dict() for r in results]
    compiled_by_executors = sum(r.build_cached is False for r in results)
    assert compiled_by_executors + stats["prebuild_compiles"] == 1, (stats, [r.build_cached for r in results])
    if expected == "executor":
        assert compiled_by_executors == 1 and stats["shipped_sets"] == 1
    for cache in caches:  # both nodes ran the candidate, from a module only one of them compiled
        assert (cache / "ext" / name / f"{name}.so").exists(), cache
