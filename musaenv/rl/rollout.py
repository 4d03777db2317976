"""Rollouts: run G multi-turn episodes per task with a :class:`~musaenv.rl.protocol.Policy` and group them for GRPO.

One env (hence one evaluator, with its build and reference-timing caches) is reused for every episode. The first
turn of all groups is sampled in one ``policy.generate`` call (``num_samples = G`` per prompt, the usual GRPO
layout); later turns depend on each episode's own feedback and are sampled one at a time as the episode runs.

The env is driven through its public API only: ``reset(seed=s, options={"task": task_id})`` and ``step(text)``.
Per-turn rewards and loss weights come from ``info["turn_rewards"]`` / ``info["loss_weights"]`` of the episode's
last step when the env provides them (musaenv's KernelGen env does); otherwise each step's reward is the turn reward
and every turn has weight 1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from musaenv.rl.bdr import TaskRequest
from musaenv.rl.protocol import Episode, EpisodeGroup, Generation, Policy, Prompt, Turn

__all__ = ["AdvantageFn", "collect_groups", "run_episode"]

logger = logging.getLogger(__name__)

AdvantageFn = Callable[[Sequence[float]], Sequence[float]]
"""Maps a group's episode returns to one advantage per episode."""


def _default_advantages(returns: Sequence[float]) -> Sequence[float]:
    # Imported lazily: musaenv.rewards is written independently and pure Python.
    from musaenv.rewards.group import grpo_advantages

    return grpo_advantages(list(returns))


def _as_dict(ev: Any) -> dict[str, Any]:
    if ev is None:
        return {}
    if hasattr(ev, "to_dict"):
        return dict(ev.to_dict())
    return dict(ev)


def _per_turn(info: Mapping[str, Any], key: str, fallback: list[float], n: int, task_id: str) -> list[float]:
    values = info.get(key)
    if values is None:
        return fallback
    values = [float(v) for v in values]
    if len(values) != n:
        raise ValueError(
            f"run_episode({task_id!r}): expected info[{key!r}] to hold one value per turn ({n}), found "
            f"{len(values)}. The env's last step must report the whole episode."
        )
    return values


def run_episode(
    env: gym.Env,
    policy: Policy,
    task_id: str,
    seed: int | None,
    first: Generation,
    first_prompt: Prompt | None = None,
    *,
    generate_kwargs: Mapping[str, Any] | None = None,
    max_steps: int = 64,
) -> Episode:
    """Run one episode whose first response is already sampled.

    Args:
        env: The env (reset here).
        policy: Samples the responses of turns 2, 3, ...; each turn's prompt is the env's latest observation.
        task_id: Passed to ``env.reset`` as ``options={"task": task_id}``.
        seed: Passed to ``env.reset``.
        first: The first turn's response.
        first_prompt: What ``first`` answered; ``None`` means the env's first observation.
        generate_kwargs: Extra keyword arguments for ``policy.generate``.
        max_steps: Safety bound; an env that has not ended after this many steps is a harness error.

    Returns:
        The :class:`Episode`, its turns carrying the shaper's per-turn rewards and loss weights.
    """
    obs, _ = env.reset(seed=seed, options={"task": task_id})
    prompt: Prompt = obs if first_prompt is None else first_prompt
    gen = first
    records: list[tuple[Prompt, Generation, dict[str, Any], float]] = []
    info: dict[str, Any] = {}
    for _ in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(gen.text)
        records.append((prompt, gen, info, float(reward)))
        if terminated or truncated:
            break
        prompt = obs
        gen = policy.generate([obs], num_samples=1, **dict(generate_kwargs or {}))[0][0]
    else:
        raise RuntimeError(f"run_episode({task_id!r}): the env did not end within max_steps={max_steps} steps.")
    n = len(records)
    rewards = _per_turn(info, "turn_rewards", [r[3] for r in records], n, task_id)
    weights = _per_turn(info, "loss_weights", [1.0] * n, n, task_id)
    turns = tuple(
        Turn(
            prompt=p,
            response=g.text,
            eval=_as_dict(inf.get("eval")),
            score=None if inf.get("score") is None else float(inf["score"]),
            reward=rw,
            loss_weight=w,
            token_ids=g.token_ids,
            logprobs=g.logprobs,
        )
        for (p, g, inf, _), rw, w in zip(records, rewards, weights)
    )
    return Episode(task_id=task_id, seed=seed, turns=turns, return_=float(sum(rewards)))


def _check_generations(gens: list[list[Generation]], n_prompts: int, group_size: int) -> None:
    if len(gens) != n_prompts or any(len(g) != group_size for g in gens):
        raise ValueError(
            f"collect_groups: expected policy.generate to return {n_prompts} lists of {group_size} generations, "
            f"found {[len(g) for g in gens]}."
        )


def collect_groups(
    env: gym.Env | Callable[[], gym.Env],
    policy: Policy,
    tasks: Sequence[str | TaskRequest],
    *,
    group_size: int,
    seed: int = 0,
    advantage_fn: AdvantageFn | None = None,
    generate_kwargs: Mapping[str, Any] | None = None,
    max_steps: int = 64,
) -> list[EpisodeGroup]:
    """Run ``group_size`` episodes per task and return one :class:`EpisodeGroup` per task, in order.

    Every episode of a group is reset with the same seed, so the group answers the same prompt (same shapes) and
    its advantages compare like with like; groups get independent seeds spawned from ``seed``.

    Args:
        env: A gymnasium env, or a zero-argument factory called once; the env is reused for every episode.
        policy: The policy to sample from.
        tasks: Task ids, or :class:`~musaenv.rl.bdr.TaskRequest` s (a repair request's prompt replaces the first
            observation; the env still evaluates against the request's task).
        group_size: Episodes per task (GRPO's G).
        seed: Root seed of the episodes' reset seeds.
        advantage_fn: Returns-to-advantages map; default ``musaenv.rewards.group.grpo_advantages``.
        generate_kwargs: Extra keyword arguments for every ``policy.generate`` call.
        max_steps: Per-episode safety bound on env steps.

    Returns:
        One group per entry of ``tasks``.
    """
    if group_size < 1:
        raise ValueError(f"collect_groups: expected group_size >= 1, found {group_size}.")
    the_env = env if isinstance(env, gym.Env) else env()
    adv_fn = advantage_fn or _default_advantages
    gk = dict(generate_kwargs or {})
    requests = [t if isinstance(t, TaskRequest) else TaskRequest(str(t)) for t in tasks]
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(len(requests))]
    first_prompts: list[Prompt] = []
    for req, s in zip(requests, seeds):
        obs, _ = the_env.reset(seed=s, options={"task": req.task_id})
        first_prompts.append(obs if req.prompt is None else req.prompt)
    gens = policy.generate(first_prompts, num_samples=group_size, **gk) if requests else []
    _check_generations(gens, len(requests), group_size)
    groups: list[EpisodeGroup] = []
    for req, s, prompt, samples in zip(requests, seeds, first_prompts, gens):
        episodes = [
            run_episode(the_env, policy, req.task_id, s, g, prompt, generate_kwargs=gk, max_steps=max_steps)
            for g in samples
        ]
        advantages = [float(a) for a in adv_fn([e.return_ for e in episodes])]
        source = "repair" if req.is_repair else "task"
        groups.append(EpisodeGroup(req.task_id, tuple(episodes), tuple(advantages), source))
        logger.debug("group %s (%s): returns %s", req.task_id, source, [round(e.return_, 4) for e in episodes])
    return groups
