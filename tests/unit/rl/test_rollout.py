"""collect_groups on a character-count env with a scripted policy: turns, rewards, weights, seeds, advantages."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from rl_doubles import CharCountEnv, ScriptedPolicy

from musaenv.rl.bdr import TaskRequest
from musaenv.rl.protocol import EpisodeBatch, Generation, Optimizer, Policy, Turn
from musaenv.rl.rollout import collect_groups


def centred(returns: Sequence[float]) -> list[float]:
    mean = sum(returns) / len(returns)
    return [r - mean for r in returns]


# First turns of (x, ep0), (x, ep1), (y, ep0), (y, ep1), sampled together; then the later turns in episode order.
SCRIPT = [
    "aaaaaaaa",  # x0: perfect at turn 1 -> terminated
    "bbbbbbbb",  # x1: 0
    "aaaabbbb",  # y0: 0.5
    "aaaaaaaa",  # y1: perfect
    "aaaaaaaa",  # x1 turn 2: perfect -> terminated
    "aabbbbbb",  # y0 turn 2: 0.25
    "bbbbbbbb",  # y0 turn 3: 0 -> truncated at max_turns = 3
]


def test_groups_follow_the_env_episodes_turn_by_turn() -> None:
    env = CharCountEnv(max_turns=3)
    policy = ScriptedPolicy(SCRIPT)
    groups = collect_groups(env, policy, ["x", "y"], group_size=2, seed=5, advantage_fn=centred)

    assert [g.task_id for g in groups] == ["x", "y"]
    x, y = groups
    assert [[t.score for t in e.turns] for e in x.episodes] == [[1.0], [0.0, 1.0]]
    assert [[t.score for t in e.turns] for e in y.episodes] == [[0.5, 0.25, 0.0], [1.0]]
    assert x.returns == (1.0, 1.0) and y.returns == (0.75, 1.0)
    assert x.advantages == (0.0, 0.0) and y.advantages == (-0.125, 0.125)
    # Per-turn rewards and loss weights come from the last step's info, not from the (end-loaded) step rewards.
    assert [t.reward for t in y.episodes[0].turns] == [0.5, 0.25, 0.0]
    assert [t.loss_weight for t in y.episodes[0].turns] == [1.0, 0.0, 0.0]
    assert [e.solved for e in y.episodes] == [False, True]
    assert y.episodes[0].turns[1].eval["stage"] == "incorrect"


def test_policy_sees_the_observations_and_samples_the_first_turn_as_a_group() -> None:
    env = CharCountEnv(max_turns=3)
    policy = ScriptedPolicy(SCRIPT)
    groups = collect_groups(env, policy, ["x", "y"], group_size=2, seed=5, advantage_fn=centred)
    first_prompts, n = policy.calls[0]
    assert n == 2 and first_prompts == ["task x: write a", "task y: write a"]
    assert [(len(p), k) for p, k in policy.calls[1:]] == [(1, 1)] * 3
    later = groups[0].episodes[1].turns[1].prompt
    assert isinstance(later, str) and "previous: 'bbbbbbbb' scored 0.0" in later
    assert groups[0].episodes[1].turns[0].prompt == "task x: write a"


def test_seeds_are_shared_within_a_group_and_differ_across_groups() -> None:
    groups = collect_groups(
        CharCountEnv(), ScriptedPolicy(["ab"]), ["x", "y"], group_size=3, seed=1, advantage_fn=centred
    )
    seeds = [[e.seed for e in g.episodes] for g in groups]
    assert len(set(seeds[0])) == 1 and len(set(seeds[1])) == 1 and seeds[0][0] != seeds[1][0]
    again = collect_groups(
        CharCountEnv(), ScriptedPolicy(["ab"]), ["x", "y"], group_size=3, seed=1, advantage_fn=centred
    )
    assert [[e.seed for e in g.episodes] for g in again] == seeds


def test_repair_requests_replace_the_first_prompt_only() -> None:
    policy = ScriptedPolicy(["bbbbbbbb", "aaaaaaaa"])
    req = TaskRequest("x", prompt="REPAIR: fix this")
    (group,) = collect_groups(CharCountEnv(max_turns=2), policy, [req], group_size=1, seed=0, advantage_fn=centred)
    assert group.source == "repair"
    assert policy.calls[0][0] == ["REPAIR: fix this"]
    assert group.episodes[0].turns[0].prompt == "REPAIR: fix this"
    later = group.episodes[0].turns[1].prompt
    assert isinstance(later, str) and later.startswith("task x: write a")


def test_env_factory_is_called_once_and_the_env_reused() -> None:
    made: list[CharCountEnv] = []

    def factory() -> CharCountEnv:
        made.append(CharCountEnv())
        return made[-1]

    collect_groups(factory, ScriptedPolicy(["a"]), ["x", "y"], group_size=2, seed=0, advantage_fn=centred)
    assert len(made) == 1 and made[0].resets == 2 + 4  # one reset per task to read the prompt, one per episode


def test_env_without_turn_rewards_falls_back_to_step_rewards() -> None:
    class Plain(CharCountEnv):
        def step(self, action: str):
            obs, _, term, trunc, info = super().step(action)
            info.pop("turn_rewards", None)
            info.pop("loss_weights", None)
            return obs, self.score(action), term, trunc, info

    (g,) = collect_groups(
        Plain(max_turns=2), ScriptedPolicy(["aaaabbbb", "aabbbbbb"]), ["x"], group_size=1, advantage_fn=centred
    )
    assert [t.reward for t in g.episodes[0].turns] == [0.5, 0.25]
    assert [t.loss_weight for t in g.episodes[0].turns] == [1.0, 1.0]
    assert g.episodes[0].return_ == 0.75


def test_records_round_trip_through_json() -> None:
    groups = collect_groups(
        CharCountEnv(max_turns=3), ScriptedPolicy(SCRIPT), ["x", "y"], group_size=2, seed=5, advantage_fn=centred
    )
    batch = EpisodeBatch(tuple(groups))
    again = EpisodeBatch.from_dict(json.loads(json.dumps(batch.to_dict())))
    assert again == batch
    assert batch.mean_return == pytest.approx((1.0 + 1.0 + 0.75 + 1.0) / 4)


def test_default_advantages_are_grpos() -> None:
    group_mod = pytest.importorskip("musaenv.rewards.group")
    (g,) = collect_groups(CharCountEnv(), ScriptedPolicy(["aaaaaaaa", "aaaabbbb", "bbbbbbbb"]), ["x"], group_size=3)
    assert g.advantages == pytest.approx(group_mod.grpo_advantages([1.0, 0.5, 0.0]))


def test_protocols_are_structural() -> None:
    assert isinstance(ScriptedPolicy(["a"]), Policy)

    class Counter:
        def update(self, batch: EpisodeBatch) -> dict[str, float]:
            return {"n": float(len(batch.groups))}

    assert isinstance(Counter(), Optimizer) and not isinstance(Counter(), Policy)


def test_policy_returning_the_wrong_shape_is_reported() -> None:
    class Short(ScriptedPolicy):
        def generate(self, prompts, *, num_samples=1, **kw):
            return super().generate(prompts, num_samples=1)

    with pytest.raises(ValueError, match=r"expected policy\.generate to return"):
        collect_groups(CharCountEnv(), Short(["a"]), ["x"], group_size=2, advantage_fn=centred)


def test_token_ids_and_logprobs_must_pair_up() -> None:
    with pytest.raises(ValueError, match="as many logprobs as token ids"):
        Generation("ab", (1, 2), (-0.5,))
    with pytest.raises(ValueError, match="as many logprobs as token ids"):
        Turn("p", "ab", token_ids=(1, 2), logprobs=(-0.5, -0.5, -0.5))
    lists = Turn("p", "ab", token_ids=[1, 2], logprobs=[-0.5, -0.25])  # type: ignore[arg-type]  # JSON gives lists
    assert lists.token_ids == (1, 2)
