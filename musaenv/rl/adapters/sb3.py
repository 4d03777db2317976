"""``DiscreteKernelEnv``: KernelGen-v0 as a small discrete-action, vector-observation env for Stable-Baselines3.

Classic RL libraries cannot emit program text. Here an action picks one of a fixed per-task pool of candidate
programs (:mod:`musaenv.rl.adapters.pool`: fast and slow correct kernels, a wrong one, a crashing one, a cheating
one, prose), the real KernelGen-v0 env evaluates it, and the policy sees a numeric summary of what happened. The
reward is the underlying env's shaped reward, unchanged, so PPO or A2C learn which program the verifier prefers
and how the shaper (PrimeEcho by default) values early success.

Stable-Baselines3 is not imported here: the env is a plain ``gymnasium.Env`` that SB3 (or any other library) can
train on. Install it with ``pip install stable-baselines3`` (the ``sb3`` extra).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from musaenv.config import EvalConfig
from musaenv.env import Evaluator, KernelGenEnv
from musaenv.errors import ConfigError
from musaenv.rewards.score import score_range
from musaenv.rl.adapters.eval_cache import CachingEvaluator
from musaenv.rl.adapters.pool import PROGRAMS, CandidatePool
from musaenv.types import Stage

__all__ = ["STAGES", "DiscreteKernelEnv"]

log = logging.getLogger(__name__)

STAGES: tuple[Stage, ...] = tuple(Stage)
"""Verdict stages in the order of the observation's one-hot block (after the "no attempt yet" slot)."""


class DiscreteKernelEnv(gym.Env[np.ndarray, np.int64]):
    """Pick a candidate program per turn; the real verifier judges it; the reward is KernelGen-v0's.

    ## Description

    Each episode is one task of ``tasks`` (drawn uniformly with the env's seeded generator, or
    ``options={"task": id}``), run as a KernelGen-v0 episode of up to ``max_turns`` turns. Each action submits one
    program of the task's pool; the episode ends at the first ``correct`` program or after ``max_turns``.

    ## Spaces

    * Action: ``Discrete(len(pool.names))``: action ``i`` submits program ``pool.names[i]``.
    * Observation: ``Box(float32)`` of ``len(tasks) + len(STAGES) + 3`` values: one-hot of the task; one-hot of
      the last verdict (slot 0: no attempt yet, then :data:`STAGES` in order); turns taken / ``max_turns``; the
      last score s(c) (0 before the first turn or when the turn was not scored), in ``[-1, 1 + lambda v_max]``.

    ## Reward

    KernelGen-v0's shaped reward for the step, paid online (PrimeEcho by default: step t pays R_t - R_{t-1}), so
    the rewards so far sum to the shaper's return of the turns played, also under ``TimeLimit``.

    ## Episode End

    As KernelGen-v0: ``terminated`` on a ``correct`` verdict, ``truncated`` after ``max_turns`` turns.

    ## Info keys

    KernelGen-v0's info (``task_id``, ``turn``, ``eval``, ``score``, ``paid_rewards``, ``episode_return``,
    ``turn_rewards``, ...) plus ``program``, the name of the submitted program.

    ## Arguments

    * ``tasks``: built-in task ids with shipped solutions (ignored when ``pool`` is given: its tasks are used).
    * ``pool``: a :class:`~musaenv.rl.adapters.pool.CandidatePool`; default the built-in ``programs`` of ``tasks``.
    * ``programs``: names of the built-in variants (default :data:`~musaenv.rl.adapters.pool.PROGRAMS`).
    * ``backend``, ``max_turns``, ``reward``, ``reward_kwargs``, ``eval_config``: passed to KernelGen-v0.
    * ``evaluator``: a shared evaluator (not closed by this env); default a ``LocalEvaluator`` owned by the env.
    * ``eval_seeds``: seed buckets of the evaluation cache (each program is really evaluated this many times per
      task); ``None`` disables the cache (every step is a real evaluation).
    * ``eval_cache_path``: JSON file that keeps the cache across processes.
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012 - gymnasium convention

    def __init__(
        self,
        tasks: Sequence[str] = ("l1_relu",),
        pool: CandidatePool | None = None,
        *,
        programs: Sequence[str] = PROGRAMS,
        backend: str = "cpu",
        max_turns: int = 3,
        reward: str | None = None,
        reward_kwargs: dict[str, Any] | None = None,
        eval_config: EvalConfig | None = None,
        evaluator: Evaluator | None = None,
        eval_seeds: int | None = 1,
        eval_cache_path: str | Path | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode: expected None or 'ansi', found {render_mode!r}")
        self.render_mode = render_mode
        self.pool = pool if pool is not None else CandidatePool.builtin(list(tasks), programs, backend)
        self.task_ids = self.pool.task_ids
        inner = evaluator
        if inner is None:
            from musaenv.evaluator.local import LocalEvaluator

            inner = LocalEvaluator(backend, eval_config)
        self._owned_evaluator = evaluator is None
        self.cache: CachingEvaluator | None = None
        if eval_seeds is not None:
            self.cache = CachingEvaluator(inner, eval_seeds, eval_cache_path, close_inner=False)
        self._inner_evaluator = inner
        self.env = KernelGenEnv(
            task=None,
            backend=backend,
            max_turns=max_turns,
            reward=reward,
            reward_kwargs=reward_kwargs,
            eval_config=eval_config,
            evaluator=inner if self.cache is None else self.cache,
        )
        self.max_turns = max_turns
        rc = self.env.config.reward
        _, self._score_high = score_range(rc.speedup_weight, rc.speedup_cap)
        n = self._obs_size = len(self.task_ids) + len(STAGES) + 3
        low = np.zeros(n, dtype=np.float32)
        high = np.ones(n, dtype=np.float32)
        low[-1], high[-1] = -1.0, self._score_high
        self.observation_space = spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = spaces.Discrete(len(self.pool.names))
        self._task_index = 0
        self._turn = 0
        self._last_stage: Stage | None = None
        self._last_score: float | None = None
        self._last_program: str | None = None

    def _obs(self) -> np.ndarray:
        n_tasks = len(self.task_ids)
        obs = np.zeros(self._obs_size, dtype=np.float32)
        obs[self._task_index] = 1.0
        stage_slot = 0 if self._last_stage is None else 1 + STAGES.index(self._last_stage)
        obs[n_tasks + stage_slot] = 1.0
        obs[-2] = self._turn / self.max_turns
        score = 0.0 if self._last_score is None else self._last_score
        obs[-1] = float(np.clip(score, -1.0, self._score_high))
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode on a task drawn from ``tasks`` (or ``options={"task": id}``)."""
        super().reset(seed=seed)
        chosen = (options or {}).get("task")
        if chosen is not None:
            if chosen not in self.task_ids:
                raise ConfigError(f"reset: task {chosen!r} is not in this env's tasks {list(self.task_ids)}")
            self._task_index = self.task_ids.index(chosen)
        else:
            self._task_index = int(self.np_random.integers(len(self.task_ids)))
        inner_seed = int(self.np_random.integers(2**31 - 1))
        _, info = self.env.reset(seed=inner_seed, options={"task": self.task_ids[self._task_index]})
        self._turn = 0
        self._last_stage = None
        self._last_score = None
        self._last_program = None
        return self._obs(), info

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Submit program ``action`` of the current task's pool."""
        index = int(action)
        if not 0 <= index < len(self.pool.names):
            raise ConfigError(f"step: expected an action in [0, {len(self.pool.names)}), found {action!r}")
        task_id = self.task_ids[self._task_index]
        response = self.pool.response(task_id, index)
        _, reward, terminated, truncated, info = self.env.step(response)
        self._turn = int(info["turn"])
        self._last_stage = Stage(info["eval"]["stage"])
        self._last_score = info["score"]
        self._last_program = self.pool.names[index]
        info["program"] = self._last_program
        return self._obs(), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        """``ansi``: one line on the task, the turn and the last verdict."""
        if self.render_mode != "ansi":
            return None
        stage = "-" if self._last_stage is None else self._last_stage.value
        return (
            f"task {self.task_ids[self._task_index]} turn {self._turn}/{self.max_turns} "
            f"program {self._last_program or '-'} verdict {stage} score {self._last_score}"
        )

    def close(self) -> None:
        """Close the inner env, and the evaluator when this env created it."""
        self.env.close()
        if self._owned_evaluator:
            self._inner_evaluator.close()
        super().close()
