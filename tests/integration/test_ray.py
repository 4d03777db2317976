"""RayEvaluator on a local Ray (num_cpus=2): the evaluator contract of the local pool, shipped artifacts, and
no lost request when an execution actor is killed mid-batch."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.pool import EvalRequest
from musaenv.evaluator.ray_backend import extract_build_specs, install_artifacts
from musaenv.tasks.builtin import get_task
from musaenv.toolchains.faults import FAULT_RULES
from musaenv.types import Stage
from tests.integration.hazards import COMPILE_ERROR_CANDIDATE, hazard_candidate

FAST = EvalConfig(static_policy="off", run_timeout_s=30.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))


def test_static_extraction_matches_what_the_candidate_would_build() -> None:
    from musaenv.tasks.parsing import extract_candidate
    from musaenv.toolchains.loader import BuildSpec

    code = extract_candidate(hazard_candidate("relu_ok"), 200_000).code
    assert code is not None
    specs = extract_build_specs(code, "cpu")
    assert len(specs) == 1
    spec = specs[0]
    assert isinstance(spec, BuildSpec) and spec == BuildSpec.from_dict(spec.to_dict())
    assert spec.functions == ("relu_ok", "relu_wrong", "throws", "segfault", "spin")
    assert "relu_impl" in spec.cpp_sources[0]
    dynamic = "import torch\nfrom torch.utils.cpp_extension import load_inline\next = load_inline('x', make_src())\n"
    assert extract_build_specs(dynamic, "cpu") == []  # unreadable calls are skipped, never executed
    assert extract_build_specs("not python (", "cpu") == []


def test_install_artifacts_is_atomic_and_content_named(tmp_path: Path) -> None:
    arts: list[dict[str, Any]] = [{"name": "musaenv_abc", "so": b"\x7fELF..."}, {"name": "../evil", "so": b"x"},
            {"name": "musaenv_bad", "failed": '{"log": "error: nope"}', "rules": FAULT_RULES},
            {"name": "musaenv_old", "failed": "Killed signal terminated program cc1plus"}]  # fmt: skip
    assert install_artifacts(arts, root=tmp_path) == 2  # a failure judged under another fault rule is not installed
    assert not (tmp_path / "musaenv_old").exists()
    assert (tmp_path / "musaenv_abc" / "musaenv_abc.so").read_bytes() == b"\x7fELF..."
    assert "nope" in (tmp_path / "musaenv_bad" / "failed.json").read_text()
    assert install_artifacts([{"name": "musaenv_abc", "so": b"other"}], root=tmp_path) == 0  # never overwrites
    assert not [p for p in tmp_path.glob("*/.*") if p.name != ".install.lock"]  # no temporary file left (the
    # entry's lock file stays: installers and readers of a shared cache take it, ext_cache.entry_lock)


@pytest.fixture(scope="module")
def ray_evaluator(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("ray")
    import ray

    from musaenv.evaluator.ray_backend import RayEvaluator

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024**2)
    # The actor gets a cache of its own, so its modules can only come from the prebuild task, via the object store.
    actor_cache = str(tmp_path_factory.mktemp("actor-cache"))
    ev = RayEvaluator("cpu", FAST, num_executors=1, max_retries=2, executor_env={"MUSAENV_CACHE_DIR": actor_cache})
    yield ev
    ev.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def relu():
    return get_task("l1_relu")


@pytest.mark.slow
@pytest.mark.ray
def test_modules_and_compile_errors_are_shipped_to_the_actor(ray_evaluator: Any, relu: Any) -> None:
    """Verdicts themselves are in test_evaluator_contract.py; here: the actor's own cache started empty."""
    ok, broken = ray_evaluator.evaluate_many(
        [EvalRequest(relu, hazard_candidate("relu_ok"), 1), EvalRequest(relu, COMPILE_ERROR_CANDIDATE, 4)],
        progress=False,
    )
    assert ok.stage is Stage.CORRECT and ok.build_cached is True, ok.to_dict()  # built by the prebuild task
    assert broken.stage is Stage.COMPILE_ERROR and broken.build_cached is True  # the verdict was shipped too
    assert ray_evaluator.tier == "cpu" and ray_evaluator.backend.name == "cpu"


def _actor_pids() -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(b"ray::_Executor"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
@pytest.mark.ray
def test_killed_actor_loses_no_request(ray_evaluator: Any, relu: Any) -> None:
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline:
            for pid in _actor_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.5)

    reqs = [EvalRequest(relu, hazard_candidate("relu_ok"), seed=10 + i) for i in range(3)]
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    results = ray_evaluator.evaluate_many(reqs, progress=False)
    thread.join(timeout=1)
    assert killed
    assert len(results) == 3 and all(r.task_id == "l1_relu" for r in results)
    assert all(r.stage is Stage.CORRECT for r in results), [r.to_dict() for r in results]


@pytest.mark.slow
@pytest.mark.ray
def test_batch_progress_names_what_runs(
    ray_evaluator: Any, relu: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Off a terminal a Ray batch says, every interval, which requests are running (as bench does)."""
    monkeypatch.setenv("MUSAENV_PROGRESS_INTERVAL_S", "0.5")
    with caplog.at_level(logging.INFO, logger="musaenv.progress"):
        (result,) = ray_evaluator.evaluate_many([EvalRequest(relu, hazard_candidate("relu_ok"), 21)], progress=True)
    assert result.stage is Stage.CORRECT, result.to_dict()
    lines = [r.getMessage() for r in caplog.records if r.name == "musaenv.progress"]
    assert any("running: l1_relu#0" in ln for ln in lines), lines
    assert "running" not in lines[-1], lines  # the last line, once it finished, names nothing
