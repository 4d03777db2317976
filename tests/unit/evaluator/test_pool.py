"""EvaluatorPool: order, back-pressure, retries of infra errors only, per-request timeouts, no lost requests.

Scheduling is tested with an injected slow evaluator double; the last test runs real workers and kills them
mid-batch.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.pool import EvalRequest, EvaluatorPool
from musaenv.tasks.builtin import get_task
from musaenv.types import EvalResult, Stage


class SlowDouble:
    """Evaluator double: sleeps, records concurrency, and answers by the response text."""

    live = 0
    peak = 0
    calls: ClassVar[list[str]] = []
    lock = threading.Lock()
    release = threading.Event()  # responses starting with "block" wait for it

    def __init__(self, backend: Any, config: Any, device_slot: Any, worker_env: Any) -> None:
        self.slot = device_slot
        self.closed = False

    def evaluate(self, task: Any, response: str, seed: int = 0) -> EvalResult:
        cls = type(self)
        with cls.lock:
            cls.live += 1
            cls.peak = max(cls.peak, cls.live)
            cls.calls.append(response)
            attempt = cls.calls.count(response)
        try:
            if response.startswith("block"):
                cls.release.wait(60)
            time.sleep(float(response.split(":")[1]) if ":" in response else 0.05)
            if response.startswith("raise"):
                raise RuntimeError("evaluator blew up")
            if response.startswith("infra") and attempt == 1:
                return EvalResult(Stage.INFRA_ERROR, task_id=task.id, messages=("flaky",))
            if response.startswith("wrong"):
                return EvalResult(Stage.INCORRECT, task_id=task.id)
            return EvalResult(Stage.CORRECT, task_id=task.id, extra={"response": response, "seed": seed})
        finally:
            with cls.lock:
                cls.live -= 1

    def close(self) -> None:
        self.closed = True


@pytest.fixture()
def double() -> type[SlowDouble]:
    SlowDouble.live, SlowDouble.peak, SlowDouble.calls = 0, 0, []
    SlowDouble.release = threading.Event()
    return SlowDouble


@pytest.fixture(scope="module")
def relu():
    return get_task("l1_relu")


def test_batch_results_come_back_in_request_order(double: type[SlowDouble], relu: Any) -> None:
    reqs = [EvalRequest(relu, f"ok{i}:{0.01 * (5 - i)}", seed=i) for i in range(6)]
    with EvaluatorPool("cpu", compile_workers=2, evaluator_factory=double) as pool:
        results = pool.evaluate_many(reqs, progress=False)
    assert [r.extra["response"] for r in results] == [r.response for r in reqs]
    assert [r.extra["seed"] for r in results] == list(range(6))


def test_in_flight_is_bounded(double: type[SlowDouble], relu: Any) -> None:
    with EvaluatorPool("cpu", compile_workers=1, max_in_flight=2, evaluator_factory=double) as pool:
        results = pool.evaluate_many([(relu, "ok:0.1")] * 7, progress=False)
    assert len(results) == 7 and all(r.is_correct for r in results)
    assert double.peak == 2


def test_submit_blocks_while_the_pool_is_full(double: type[SlowDouble], relu: Any) -> None:
    with EvaluatorPool("cpu", compile_workers=1, max_in_flight=1, evaluator_factory=double) as pool:
        first = pool.submit(relu, "block")
        second: list[Any] = []
        producer = threading.Thread(target=lambda: second.append(pool.submit(relu, "ok")))
        producer.start()
        producer.join(timeout=0.5)
        assert producer.is_alive() and not second  # held back while the only place is taken
        double.release.set()
        producer.join(timeout=30)
        assert first.result().is_correct and second[0].result().is_correct


def test_only_infra_errors_are_retried(double: type[SlowDouble], relu: Any) -> None:
    with EvaluatorPool("cpu", compile_workers=2, max_retries=2, evaluator_factory=double) as pool:
        flaky, wrong = pool.evaluate_many([(relu, "infra-once"), (relu, "wrong")], progress=False)
    assert flaky.is_correct and flaky.extra["retries"] == 1
    assert wrong.stage is Stage.INCORRECT and double.calls.count("wrong") == 1


def test_an_exception_becomes_an_infra_error_result(double: type[SlowDouble], relu: Any) -> None:
    with EvaluatorPool("cpu", compile_workers=1, max_retries=1, evaluator_factory=double) as pool:
        bad, good = pool.evaluate_many([(relu, "raise"), (relu, "ok")], progress=False)
    assert bad.stage is Stage.INFRA_ERROR and "blew up" in bad.messages[0]
    assert double.calls.count("raise") == 2  # retried once
    assert good.is_correct


def test_request_timeout_answers_without_waiting_for_the_evaluator(double: type[SlowDouble], relu: Any) -> None:
    with EvaluatorPool("cpu", compile_workers=2, request_timeout_s=0.3, evaluator_factory=double) as pool:
        slow, fast = pool.evaluate_many([(relu, "block"), (relu, "ok:0.0")], progress=False)
        still_running = double.live == 1  # the blocked evaluation has not finished: the batch did not wait for it
        double.release.set()
    assert still_running
    assert slow.stage is Stage.INFRA_ERROR and slow.extra.get("pool_timeout")
    assert fast.is_correct


def test_evaluators_of_one_device_share_its_slot(double: type[SlowDouble], relu: Any) -> None:
    made: list[SlowDouble] = []

    def factory(*args: Any) -> SlowDouble:
        made.append(double(*args))
        return made[-1]

    with EvaluatorPool("cpu", compile_workers=2, devices=["cpu"], evaluator_factory=factory) as pool:
        pool.evaluate_many([(relu, "ok:0.2")] * 3, progress=False)
    assert len(made) >= 2 and len({id(ev.slot) for ev in made}) == 1


def _worker_pids() -> list[int]:
    """Worker processes under this one: fresh interpreters, fork servers and the workers they forked."""
    from musaenv.isolation.proctree import descendants

    pids = []
    for pid in descendants(os.getpid()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"musaenv.worker.candidate" in cmd or b"musaenv.isolation.forkserver" in cmd:
            pids.append(pid)
    return pids


@pytest.mark.slow
def test_killing_workers_mid_batch_loses_no_request(relu: Any) -> None:
    from tests.integration.hazards import hazard_candidate

    cfg = EvalConfig(static_policy="off", timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))
    reqs = [EvalRequest(relu, hazard_candidate("relu_ok"), seed=i) for i in range(4)]
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(killed) < 3:
            for pid in _worker_pids():
                if pid not in killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(2.0)

    thread = threading.Thread(target=killer, daemon=True)
    with EvaluatorPool("cpu", cfg, compile_workers=1, max_in_flight=2, max_retries=2) as pool:
        thread.start()
        results = pool.evaluate_many(reqs, progress=False)
        thread.join(timeout=1)
        after = pool.evaluate(relu, hazard_candidate("relu_ok"), seed=99)
    assert killed, "no worker process was found to kill"
    assert len(results) == len(reqs)
    assert all(r.task_id == "l1_relu" for r in results)
    assert all(r.stage in (Stage.CORRECT, Stage.RUNTIME_ERROR, Stage.INFRA_ERROR) for r in results)
    assert after.is_correct, after.to_dict()
