"""Test doubles for the RL tests: a text env scored by character counts, and a scripted policy.

Imported by module name: pytest puts this folder on ``sys.path`` (rootdir-relative ``prepend`` import mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from musaenv.rl.protocol import Generation, Prompt


class CharCountEnv(gym.Env):
    """A multi-turn text env with the KernelGen info contract, scored without any compiler.

    The score of a response is the fraction of its first ``length`` characters equal to ``target`` (so the
    optimum, ``target * length``, scores 1). An episode ends at the first perfect response (terminated) or after
    ``max_turns`` (truncated). Step rewards are 0 except at the end, where they equal the return; the last step's
    info carries ``turn_rewards`` (each turn's score, so the return is the sum of scores) and ``loss_weights``
    (first turn only, as PrimeEcho trains). ``eval["stage"]`` is ``"correct"`` for a perfect response.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium convention

    def __init__(self, target: str = "a", length: int = 8, max_turns: int = 1) -> None:
        self.target, self.length, self.max_turns = target, length, max_turns
        self.observation_space = gym.spaces.Text(max_length=100_000)
        self.action_space = gym.spaces.Text(max_length=100_000)
        self.task_id = ""
        self.scores: list[float] = []
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.task_id = (options or {}).get("task", "toy")
        self.scores = []
        self.resets += 1
        return f"task {self.task_id}: write {self.target}", {"task_id": self.task_id}

    def score(self, text: str) -> float:
        return sum(c == self.target for c in text[: self.length]) / self.length

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        s = self.score(action)
        self.scores.append(s)
        terminated = s >= 1.0
        truncated = not terminated and len(self.scores) >= self.max_turns
        info: dict[str, Any] = {
            "eval": {"stage": "correct" if terminated else "incorrect", "messages": [f"score {s}"]},
            "score": s,
            "turn": len(self.scores),
            "task_id": self.task_id,
        }
        done = terminated or truncated
        if done:
            info["turn_rewards"] = list(self.scores)
            info["loss_weights"] = [1.0] + [0.0] * (len(self.scores) - 1)
            info["scores"] = list(self.scores)
        obs = f"task {self.task_id}: write {self.target}\nprevious: {action!r} scored {s}"
        return obs, (sum(self.scores) if done else 0.0), terminated, truncated, info


class ScriptedPolicy:
    """A Policy test double: answers from a fixed script in call order and records every prompt it saw."""

    def __init__(self, script: Sequence[str]) -> None:
        self.script = list(script)
        self.calls: list[tuple[list[Prompt], int]] = []
        self._i = 0

    def generate(self, prompts: Sequence[Prompt], *, num_samples: int = 1, **kw: Any) -> list[list[Generation]]:
        self.calls.append((list(prompts), num_samples))
        out = []
        for _ in prompts:
            row = []
            for _ in range(num_samples):
                row.append(Generation(self.script[self._i % len(self.script)]))
                self._i += 1
            out.append(row)
        return out
