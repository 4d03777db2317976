"""KernelGen-v0 as a SkyRL-gym ``BaseTextEnv`` (``pip install 'musaenv[skyrl]'``), registered as ``musaenv``.

SkyRL drives text envs from dataset rows: it builds ``skyrl_gym.make(env_class, env_config=..., extras=row)`` per
trajectory, calls ``init(prompt)`` with the row's chat ``prompt``, then ``step(reply)`` until ``done``; each step's
``observations`` are the new messages it appends to the conversation it keeps. ``musaenv dataset`` writes such rows
(``env_class`` is ``musaenv``; the ``task`` field picks the task)::

    import musaenv.rl.adapters.skyrl  # registers "musaenv"
    import skyrl_gym

    env = skyrl_gym.make("musaenv", env_config={"backend": "cpu", "max_turns": 3}, extras={"task": "l1_relu"})
    prompt, meta = env.init([])                  # [] -> the task prompt as a user message
    out = env.step(reply)                        # {"observations": [feedback message], "reward", "done", ...}

The turn limit is the row's ``max_turns`` (SkyRL's convention, as its own envs read ``extras["max_turns"]``),
else ``env_config``'s, else KernelGen-v0's default (``musaenv dataset --max-turns N`` writes the column).
SkyRL-gym 0.4 has no plugin entry points, so the import (or :func:`register_skyrl_env`) must come first. The
reward is the env's shaped reward per turn, paid online (PrimeEcho: R_t - R_{t-1}), so a trajectory SkyRL cuts
short still sums to the shaper's return of its turns (``metadata["episode_return"]`` on every step). Every
instance with the same settings shares one :class:`~musaenv.evaluator.pool.EvaluatorPool` (SkyRL runs many
trajectories at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs import register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import registry

from musaenv.config import EvalConfig
from musaenv.env import KernelGenEnv
from musaenv.rl.adapters.shared import close_shared_evaluators, shared_evaluator

__all__ = ["ENV_ID", "KernelGenSkyRLEnv", "close_shared_evaluators", "register_skyrl_env"]

ENV_ID = "musaenv"
_ENV_KEYS = ("backend", "max_turns", "reward", "reward_kwargs", "stop_on_success", "levels")


def _as_dict(cfg: Any) -> dict[str, Any]:
    if cfg is None:
        return {}
    if isinstance(cfg, Mapping):
        return dict(cfg)
    return dict(getattr(cfg, "items", lambda: [])())  # an OmegaConf DictConfig (SkyRL's configs)


class KernelGenSkyRLEnv(BaseTextEnv):
    """One KernelGen-v0 episode per SkyRL trajectory; each step's observation is the verifier's new message.

    Args:
        env_config: ``backend`` (default ``cpu``), ``max_turns``, ``reward``, ``reward_kwargs``,
            ``stop_on_success``, ``levels``, ``eval_config`` (an :class:`EvalConfig` or its dict), or ``evaluator``.
        extras: The dataset row: ``task`` (or ``extra_info.task``) picks the task, ``seed`` the seed, and
            ``max_turns`` (or ``extra_info.max_turns``) the turn limit, over ``env_config``'s (as SkyRL-gym's own
            envs read it).
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        cfg, row = _as_dict(env_config), dict(extras or {})
        ec = cfg.get("eval_config")
        eval_config = EvalConfig.from_dict(_as_dict(ec)) if ec is not None and not isinstance(ec, EvalConfig) else ec
        backend = str(cfg.get("backend", "cpu"))
        evaluator = cfg.get("evaluator") or shared_evaluator(backend, eval_config)
        kwargs = {k: cfg[k] for k in _ENV_KEYS if k in cfg}
        info = _as_dict(row.get("extra_info"))
        row_turns = row.get("max_turns", info.get("max_turns"))
        if row_turns is not None:  # SkyRL's convention: the row's turn limit wins over the env config's
            kwargs["max_turns"] = int(row_turns)
        self.env = KernelGenEnv(**kwargs, eval_config=eval_config, evaluator=evaluator, observation="message")
        self.max_turns = self.env.config.max_turns
        self.task = row.get("task") or info.get("task")
        self.seed = row.get("seed", info.get("seed"))
        self.scores: list[float | None] = []
        self.verdicts: list[str] = []

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Start the episode; an empty ``prompt`` becomes the task prompt as one user message."""
        obs, info = self.env.reset(seed=None if self.seed is None else int(self.seed),
                                   options={"task": self.task} if self.task else None)  # fmt: skip
        self.turns, self.scores, self.verdicts = 0, [], []
        return (list(prompt) if prompt else [{"role": "user", "content": obs}]), {"task_id": info["task_id"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Evaluate one reply; the next observation is the verifier's feedback message (none once done)."""
        _, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self.scores.append(info["score"])
        self.verdicts.append(info["eval"]["stage"])
        done = bool(terminated or truncated)
        observations = [] if done else [{"role": "user", "content": info["feedback"]}]
        # The env pays online, so the rewards so far sum to episode_return whether the env or SkyRL ends the episode.
        metadata = {"eval": info["eval"], "score": info["score"], "task_id": info["task_id"],
                    "episode_return": info["episode_return"]}  # fmt: skip
        return BaseTextEnvStepOutput(observations=observations, reward=float(reward), done=done, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode numbers SkyRL averages: turns, first score, whether a turn was correct."""
        first = self.scores[0] if self.scores else None
        return {"turns": self.turns, "first_score": first, "solved": float("correct" in self.verdicts)}

    def close(self) -> None:
        """Close the env (the shared evaluator stays open: :func:`close_shared_evaluators`)."""
        self.env.close()


def register_skyrl_env() -> None:
    """Register ``musaenv`` with SkyRL-gym (idempotent; done on import of this module)."""
    if ENV_ID not in registry:
        register(id=ENV_ID, entry_point="musaenv.rl.adapters.skyrl:KernelGenSkyRLEnv")


register_skyrl_env()
