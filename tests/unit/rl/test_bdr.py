"""Buffered Dynamic Retry: the all-failed test, FIFO eviction, re-issue probability, repair prompts."""

from __future__ import annotations

import numpy as np
import pytest

from musaenv.rl.bdr import BufferedDynamicRetry, TaskRequest, all_failed, summarize_eval
from musaenv.rl.protocol import Episode, EpisodeGroup, Turn


def _group(task_id: str, returns: list[float], stages: list[str] | None = None, source: str = "task") -> EpisodeGroup:
    stages = stages or ["compile_error"] * len(returns)
    episodes = tuple(
        Episode(
            task_id,
            7,
            (
                Turn(
                    prompt=f"prompt of {task_id}",
                    response=f"response {k} to {task_id}",
                    eval={"stage": st, "messages": [f"error {k}"], "compiler_log": "undefined symbol"},
                    score=r,
                    reward=r,
                ),
            ),
            r,
        )
        for k, (r, st) in enumerate(zip(returns, stages))
    )
    return EpisodeGroup(task_id, episodes, (0.0,) * len(returns), source)


def test_all_failed_needs_equal_returns_and_no_correct_episode() -> None:
    assert all_failed(_group("t", [-1.0, -1.0, -1.0]))
    assert not all_failed(_group("t", [-1.0, -0.5, -1.0]))  # some signal: GRPO can learn from it
    assert not all_failed(_group("t", [1.0, 1.0], ["correct", "correct"]))  # all solved: nothing to repair


def test_observe_group_buffers_the_first_episodes_first_turn_with_feedback() -> None:
    bdr = BufferedDynamicRetry(capacity=4, probability=0.5)
    assert bdr.observe_group(_group("t1", [-1.0, -1.0]))
    assert not bdr.observe_group(_group("t2", [-1.0, 1.0], ["compile_error", "correct"]))
    assert len(bdr) == 1
    item = bdr.items[0]
    assert (item.task_id, item.prompt, item.response) == ("t1", "prompt of t1", "response 0 to t1")
    assert item.feedback == "stage: compile_error\nerror 0\ncompiler_log:\nundefined symbol"
    prompt = bdr.repair_prompt(item)
    for part in ("prompt of t1", "response 0 to t1", "undefined symbol"):
        assert part in prompt


def test_repair_groups_are_not_buffered_again_by_default() -> None:
    assert not BufferedDynamicRetry().observe_group(_group("t", [-1.0, -1.0], source="repair"))
    assert BufferedDynamicRetry(buffer_repairs=True).observe_group(_group("t", [-1.0, -1.0], source="repair"))


def test_full_buffer_evicts_the_oldest_item() -> None:
    bdr = BufferedDynamicRetry(capacity=2)
    for t in ("t1", "t2", "t3"):
        bdr.observe_group(_group(t, [-1.0, -1.0]))
    assert [i.task_id for i in bdr.items] == ["t2", "t3"]


def test_probability_zero_never_reissues() -> None:
    bdr = BufferedDynamicRetry(probability=0.0)
    bdr.observe_group(_group("old", [-1.0, -1.0]))
    reqs = bdr.sample_tasks(["a", "b", "c"], np.random.default_rng(0))
    assert reqs == [TaskRequest("a"), TaskRequest("b"), TaskRequest("c")]
    assert len(bdr) == 1


def test_probability_one_reissues_buffered_items_oldest_first_until_empty() -> None:
    bdr = BufferedDynamicRetry(probability=1.0)
    bdr.observe_group(_group("old1", [-1.0, -1.0]))
    bdr.observe_group(_group("old2", [-1.0, -1.0]))
    reqs = bdr.sample_tasks(["a", "b", "c"], np.random.default_rng(0))
    assert [(r.task_id, r.is_repair) for r in reqs] == [("old1", True), ("old2", True), ("c", False)]
    assert reqs[0].prompt is not None and "response 0 to old1" in reqs[0].prompt
    assert reqs[0].item is not None and reqs[0].item.task_id == "old1"
    assert len(bdr) == 0


def test_intermediate_probability_follows_the_seeded_draws() -> None:
    p = 0.4
    bdr = BufferedDynamicRetry(probability=p)
    for t in ("r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"):
        bdr.observe_group(_group(t, [-1.0, -1.0]))
    slots = [f"s{i}" for i in range(8)]
    reqs = bdr.sample_tasks(slots, np.random.default_rng(123))
    draws = np.random.default_rng(123).random(8)
    assert [r.is_repair for r in reqs] == [bool(u < p) for u in draws]
    n_rep = int((draws < p).sum())
    assert 0 < n_rep < 8  # this seed exercises both branches
    assert [r.task_id for r in reqs if r.is_repair] == [f"r{i}" for i in range(1, n_rep + 1)]
    assert [r.task_id for r in reqs if not r.is_repair] == [s for s, u in zip(slots, draws) if u >= p]


def test_configuration_is_validated_and_feedback_is_truncated() -> None:
    with pytest.raises(ValueError, match="capacity"):
        BufferedDynamicRetry(capacity=0)
    with pytest.raises(ValueError, match="probability"):
        BufferedDynamicRetry(probability=1.5)
    with pytest.raises(ValueError, match="feedback"):
        BufferedDynamicRetry(template="{prompt} {response}")
    long = summarize_eval({"stage": "runtime_error", "runtime_log": "x" * 5000}, max_chars=100)
    assert len(long) == 100 and long.endswith("[truncated]")
