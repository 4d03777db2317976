"""``KernelGenEnv``: the multi-turn kernel-generation environment."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import gymnasium as gym
from gymnasium import spaces

from musaenv.backends import get_backend
from musaenv.config import EnvConfig, EvalConfig, RewardConfig
from musaenv.errors import ConfigError
from musaenv.evaluator.plan import plan_pool
from musaenv.tasks.builtin import builtin_tasks, get_task
from musaenv.tasks.derive import ShapeConfig
from musaenv.tasks.external import check_memory, derive_task, load_suite
from musaenv.tasks.prompts import (
    EPISODE_OVER,
    OBS_CHARSET,
    feedback_message,
    feedback_text,
    initial_prompt,
    turn_prompt,
)
from musaenv.tasks.task import Task
from musaenv.types import EvalResult

__all__ = ["Evaluator", "KernelGenEnv"]

log = logging.getLogger(__name__)

MAX_OBS_CHARS = 262_144
MAX_ACTION_CHARS = 200_000


class Evaluator(Protocol):
    """What the env needs from an evaluator (:class:`musaenv.evaluator.LocalEvaluator` and the Ray one)."""

    tier: str

    def evaluate(self, task: Task, response: str, seed: int = 0) -> EvalResult:
        """Evaluate one response on a task."""
        ...

    def close(self) -> None:
        """Release workers."""
        ...


class KernelGenEnv(gym.Env[str, str]):
    """Multi-turn kernel generation: write a faster ``ModelNew`` for a PyTorch reference program.

    ## Description

    Each episode is one task (a KernelBench-format reference program). The policy answers with a program
    defining ``class ModelNew`` whose kernels are built with ``torch.utils.cpp_extension.load_inline``. The
    verifier builds it (content-hashed, cached, with a timeout), runs it in a sandboxed worker process
    against the reference on fresh random inputs over several shapes, times both, and checks for cheating.
    After a failed turn the next observation carries the verifier's feedback (MusaCoder's multi-turn protocol).

    ## Spaces

    * Observation: ``Text`` (printable ASCII, up to 262,144 characters): the prompt for the next response.
    * Action: ``Text`` (printable ASCII, up to 200,000 characters): the response. Any ``str`` is accepted;
      longer, empty or non-code responses are judged ``format_error`` in milliseconds without compiling.

    ## Reward

    Per candidate, MooreEval's score s(c) (MusaCoder eq. 2): -1 on failure or cheating, -0.5 + 0.5 q for a
    partially correct candidate, 1 + lambda * min(max(v - 1, 0), v_max) when correct. The episode reward
    comes from a shaper, PrimeEcho by default (R = alpha s_1 + (1 - alpha) max_k s_k + b_early), paid online:
    with R_t the shaper's return of turns 1..t (for PrimeEcho alpha s_1 + (1 - alpha) max_{k<=t} s_k +
    b_early(t)), step t pays R_t - R_{t-1}. After every step the rewards paid sum to the return of the turns
    played, so the return is right whoever ends the episode (``max_turns``, ``TimeLimit``, a server session closed
    early). Turns with ``infra_error`` are masked (score ``None``), never failures.

    ## Episode End

    * ``terminated``: the candidate is ``correct`` and ``stop_on_success`` is set (the default).
    * ``truncated``: ``max_turns`` responses were given without success.

    ## Info keys

    * ``task_id``, ``turn`` (1-based after a step, 0 after reset), ``backend``, ``tier``, ``task_warnings``.
    * ``eval``: the turn's :class:`~musaenv.types.EvalResult` as a dict; ``score``: s(c) or ``None``.
    * ``feedback``: the new user message after this turn (verdict, logs, and the request to try again unless the
      episode is over): what a chat-based trainer appends to the conversation it keeps.
    * The episode so far, as if it ended at this step: ``scores``, ``paid_rewards`` (the reward paid at each
      step), ``episode_return`` (their sum: the shaper's return of the turns played), ``turn_rewards`` (the
      shaper's per-turn credit, for trainers; PrimeEcho credits turn 1) and ``loss_weights`` (e.g. PrimeEcho
      trains the first turn only).

    ## Arguments

    * ``task``: built-in id, path of a KernelBench-format file, or a :class:`Task`; ``None`` samples one from
      the built-in suite (``levels`` filters it) with the env's seeded generator at every reset.
    * ``tasks``: a folder of KernelBench-format files (e.g. a KernelBench checkout's ``KernelBench``) sampled at
      every reset instead of the built-in suite (``levels`` filters it by ``level<N>`` folder). Each sampled
      file's tiers are derived on first use and cached (:mod:`musaenv.tasks.derive`); ``shape_config`` sets the
      budgets. ``info["task_warnings"]`` carries the task's warnings (``single_shape``: checked at one shape).
    * ``backend``: ``auto`` (CUDA, else MUSA, else CPU), ``cpu``, ``cuda``, ``triton``, ``musa`` or ``cupy``
      (CUDA kernels compiled by NVRTC through CuPy; docs/backends.md).
    * ``max_turns``, ``stop_on_success``, ``feedback_chars``: see :class:`~musaenv.config.EnvConfig`.
    * ``reward`` / ``reward_kwargs``: shaper name and parameters (see :mod:`musaenv.rewards`).
    * ``config``: a full :class:`~musaenv.config.EnvConfig` (the keyword arguments above override it).
    * ``eval_config``: an :class:`~musaenv.config.EvalConfig` (trials, tolerances, timeouts, sandbox).
    * ``evaluator``: a shared evaluator (e.g. one per vector env); the env does not close a shared one.
    * ``observation``: ``transcript`` (default: the whole conversation re-rendered as one text) or ``message``
      (after a step, only the new user message, ``info["feedback"]``; the task prompt after a reset).

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012 - gymnasium convention

    def __init__(
        self,
        task: str | Task | None = None,
        backend: str = "auto",
        max_turns: int | None = None,
        reward: str | None = None,
        reward_kwargs: dict[str, Any] | None = None,
        config: EnvConfig | None = None,
        eval_config: EvalConfig | None = None,
        evaluator: Evaluator | None = None,
        levels: tuple[int, ...] | None = None,
        stop_on_success: bool | None = None,
        render_mode: str | None = None,
        observation: str = "transcript",
        tasks: str | None = None,
        shape_config: ShapeConfig | None = None,
    ) -> None:
        cfg = config or EnvConfig()
        reward_cfg = cfg.reward
        if reward is not None or reward_kwargs is not None:
            reward_cfg = RewardConfig(
                speedup_weight=reward_cfg.speedup_weight,
                speedup_cap=reward_cfg.speedup_cap,
                shaper=reward or reward_cfg.shaper,
                shaper_kwargs=dict(reward_kwargs or {}),
            )
        cfg = cfg.replace(
            max_turns=cfg.max_turns if max_turns is None else max_turns,
            stop_on_success=cfg.stop_on_success if stop_on_success is None else stop_on_success,
            eval=eval_config or cfg.eval,
            reward=reward_cfg,
        )
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode: expected None or 'ansi', found {render_mode!r}")
        if observation not in ("transcript", "message"):
            raise ConfigError(f"observation: expected 'transcript' or 'message', found {observation!r}")
        self.observation_mode = observation
        self.config = cfg
        self.render_mode = render_mode
        self._fixed_task = get_task(task) if task is not None else None
        self._shape_config = shape_config
        self._derived: dict[str, Task] = {}
        if tasks is not None:
            self._pool = load_suite(tasks, levels=levels, derive=False)  # derived when sampled, then cached
        else:
            self._pool = builtin_tasks() if levels is None else [t for t in builtin_tasks() if t.level in levels]
        self._external = tasks is not None
        if self._fixed_task is None and not self._pool:
            raise ConfigError(f"levels={levels!r} selects no built-in task; use levels among 1, 2, 3")
        from musaenv.rewards import shaper_from_config

        self.shaper = shaper_from_config(cfg.reward)
        self._backend_name = backend
        self._evaluator = evaluator
        self._owns_evaluator = evaluator is None
        self.observation_space = spaces.Text(max_length=MAX_OBS_CHARS, min_length=0, charset=OBS_CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=0, charset=OBS_CHARSET)
        self._task: Task | None = None
        self._reset_episode_state()

    def _reset_episode_state(self) -> None:
        self._first_prompt = ""
        self._history: list[tuple[str, str]] = []
        self._scores: list[float | None] = []
        self._results: list[EvalResult] = []
        self._paid: list[float] = []
        self._done = False
        self._obs = ""

    @property
    def evaluator(self) -> Evaluator:
        """The evaluator (created on first use, so constructing the env starts no process)."""
        if self._evaluator is None:
            from musaenv.evaluator import LocalEvaluator

            self._evaluator = LocalEvaluator(self._backend_name, self.config.eval)
        return self._evaluator

    @property
    def task(self) -> Task | None:
        """The current episode's task."""
        return self._task

    def _tier(self) -> str:
        if self.config.eval.tier != "auto":
            return self.config.eval.tier
        return self.evaluator.tier

    def _backend(self) -> str:
        ev = self.evaluator
        backend = getattr(ev, "backend", None)
        return str(getattr(backend, "name", self._backend_name))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode; ``options={"task": id_or_path}`` picks the task for this episode only."""
        super().reset(seed=seed)
        self._reset_episode_state()
        chosen = (options or {}).get("task")
        if chosen is not None:
            self._task = get_task(chosen)
        elif self._fixed_task is not None:
            self._task = self._fixed_task
        else:
            self._task = self._sampled(self._pool[int(self.np_random.integers(len(self._pool)))])
        ev = self.config.eval
        copies = ev.num_trials + ev.stress_count + (plan_pool(ev) if self._tier() != "gpu" else 1)
        check_memory(self._task, self._tier(), ev.sandbox.address_space_mb, copies)  # before any draw
        self._first_prompt = initial_prompt(
            self._task, get_backend(self._backend(), strict=False), self._tier(), ev.static_policy
        )
        self._obs = self._first_prompt
        return self._obs, self._info(turn=0)

    def _sampled(self, task: Task) -> Task:
        """A task drawn from a folder, with its derived tiers (derived once per env, cached on disk)."""
        if not self._external:
            return task
        if task.id not in self._derived:
            self._derived[task.id] = derive_task(task, self._shape_config)
        return self._derived[task.id]

    def _info(self, turn: int) -> dict[str, Any]:
        assert self._task is not None
        return {
            "task_id": self._task.id,
            "turn": turn,
            "backend": self._backend(),
            "tier": self._tier(),
            "task_warnings": list(self._task.warnings),
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Evaluate one response; see the class docstring for rewards and episode end."""
        if self._task is None or self._done:
            raise gym.error.ResetNeeded("call reset() before step(), and again after an episode ends")
        step_seed = int(self.np_random.integers(2**31 - 1))
        result = self.evaluator.evaluate(self._task, action, seed=step_seed)
        from musaenv.rewards import score_from_config

        score = score_from_config(result, self.config.reward)
        self._scores.append(score)
        self._results.append(result)
        turn = len(self._scores)
        terminated = result.is_correct and self.config.stop_on_success
        truncated = not terminated and turn >= self.config.max_turns
        self._done = terminated or truncated
        reward = float(self.shaper.step_reward(self._scores, self._results, done=self._done))
        self._paid.append(reward)
        info = self._info(turn)
        info.update(eval=result.to_dict(), score=score)
        feedback = feedback_text(info["eval"], score, self.config.feedback_chars)
        self._history.append((action if isinstance(action, str) else repr(action)[:2000], feedback))
        info["feedback"] = feedback_message(feedback, self._done)
        info.update(self._episode_summary())
        if self.observation_mode == "message":
            self._obs = info["feedback"]
        elif self._done:
            self._obs = self._first_prompt + "\n\n" + EPISODE_OVER + feedback
        else:
            self._obs = turn_prompt(self._first_prompt, self._history)
        return self._obs[:MAX_OBS_CHARS], reward, terminated, truncated, info

    def _episode_summary(self) -> dict[str, Any]:
        return {
            "scores": list(self._scores),
            "paid_rewards": list(self._paid),
            "episode_return": float(sum(self._paid)),
            "turn_rewards": self.shaper.episode_rewards(self._scores, self._results),
            "loss_weights": self.shaper.loss_weights(self._scores),
        }

    def render(self) -> str | None:
        """``ansi``: the current observation."""
        return self._obs if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Stop the evaluator's workers if this env created it."""
        if self._owns_evaluator and self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None
        super().close()
