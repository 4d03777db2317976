"""Record finished ``KernelGen`` episodes as JSONL and read them back as typed records. No torch.

One line per finished episode: the task, the reset seed, every turn (response, the verifier's
:class:`~musaenv.types.EvalResult` as a dict, score s(c), the reward the env paid, the shaper's per-turn credit and
loss weight), the shaper's name and parameters, the score parameters, and the return. The files are what
``musaenv ablate`` re-scores offline under other shapers, with no recompiling.

Typical use::

    import gymnasium as gym
    import musaenv
    from musaenv.recording import RecordEpisodes, read_episodes

    env = RecordEpisodes(gym.make("KernelGen-v0", task="l1_relu", backend="cpu"), "runs/episodes.jsonl")
    obs, info = env.reset(seed=0)
    ...  # step until the episode ends; the line is written then
    episodes = read_episodes("runs/episodes.jsonl")
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from musaenv.errors import MusaEnvError
from musaenv.types import EvalResult, Stage

__all__ = ["FORMAT_VERSION", "EpisodeRecord", "RecordEpisodes", "TurnRecord", "iter_episodes", "read_episodes"]

log = logging.getLogger(__name__)

#: Version of the line format; readers refuse lines from a newer version.
FORMAT_VERSION = 1


def _opt_float(x: Any) -> float | None:
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class TurnRecord:
    """One turn of a recorded episode.

    Attributes:
        turn: 1-based turn number.
        response: The policy's response text.
        eval: The verdict, as :meth:`EvalResult.to_dict` wrote it.
        score: s(c) of the turn, ``None`` for a masked (``infra_error``) turn.
        reward: The reward the env paid at this step.
        turn_reward: The shaper's per-turn credit (``info["turn_rewards"][turn - 1]`` at the episode's end).
        loss_weight: Whether (and how much) this turn's tokens enter the loss under the recorded shaper.
    """

    turn: int
    response: str
    eval: dict[str, Any]
    score: float | None
    reward: float
    turn_reward: float
    loss_weight: float

    @property
    def result(self) -> EvalResult:
        """The verdict as an :class:`EvalResult`."""
        return EvalResult.from_dict(self.eval)

    @property
    def stage(self) -> Stage:
        """The verdict's stage."""
        return Stage(self.eval["stage"])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "turn": self.turn,
            "response": self.response,
            "eval": self.eval,
            "score": self.score,
            "reward": self.reward,
            "turn_reward": self.turn_reward,
            "loss_weight": self.loss_weight,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TurnRecord:
        """Inverse of :meth:`to_dict`."""
        return cls(
            turn=int(d["turn"]),
            response=str(d.get("response", "")),
            eval=dict(d["eval"]),
            score=_opt_float(d.get("score")),
            reward=float(d.get("reward", 0.0)),
            turn_reward=float(d.get("turn_reward", 0.0)),
            loss_weight=float(d.get("loss_weight", 0.0)),
        )


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished episode.

    Attributes:
        task_id: The episode's task.
        seed: The seed given to ``reset`` (``None`` when the env continued its generator).
        episode: Index of the episode in the recorder that wrote it (0-based).
        turns: The turns, in order.
        shaper: Name of the env's reward shaper.
        shaper_params: Its parameters (``RewardShaper.params()``).
        speedup_weight: lambda of s(c) in the env's ``RewardConfig``.
        speedup_cap: v_max of s(c).
        episode_return: The return the env reported.
        terminated: The episode ended on a correct turn.
        truncated: The turn limit was reached without success.
        group: Optional group label (episodes of one prompt sampled together); ``None`` groups by task.
        meta: Free-form JSON-safe details (backend, tier, ...).
    """

    task_id: str
    seed: int | None
    episode: int
    turns: tuple[TurnRecord, ...]
    shaper: str
    shaper_params: dict[str, Any]
    speedup_weight: float
    speedup_cap: float
    episode_return: float
    terminated: bool
    truncated: bool
    group: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def scores(self) -> list[float | None]:
        """Recorded s(c) per turn (``None`` = masked)."""
        return [t.score for t in self.turns]

    @property
    def results(self) -> list[EvalResult]:
        """The verdicts as :class:`EvalResult` records."""
        return [t.result for t in self.turns]

    @property
    def first_success_turn(self) -> int | None:
        """1-based turn of the first ``correct`` verdict, or ``None``."""
        return next((t.turn for t in self.turns if t.eval.get("stage") == Stage.CORRECT.value), None)

    @property
    def group_key(self) -> str:
        """What episodes are grouped by: ``group`` when set, else the task id."""
        return self.group if self.group is not None else self.task_id

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (one JSONL line)."""
        return {
            "version": FORMAT_VERSION,
            "task_id": self.task_id,
            "seed": self.seed,
            "episode": self.episode,
            "group": self.group,
            "shaper": self.shaper,
            "shaper_params": self.shaper_params,
            "speedup_weight": self.speedup_weight,
            "speedup_cap": self.speedup_cap,
            "episode_return": self.episode_return,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "meta": self.meta,
            "turns": [t.to_dict() for t in self.turns],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeRecord:
        """Inverse of :meth:`to_dict`.

        Raises:
            MusaEnvError: the line was written by a newer format version.
        """
        version = int(d.get("version", 1))
        if version > FORMAT_VERSION:
            raise MusaEnvError(
                f"episode record format version {version} is newer than this musaenv reads ({FORMAT_VERSION}); "
                "upgrade musaenv."
            )
        seed = d.get("seed")
        return cls(
            task_id=str(d["task_id"]),
            seed=None if seed is None else int(seed),
            episode=int(d.get("episode", 0)),
            turns=tuple(TurnRecord.from_dict(t) for t in d["turns"]),
            shaper=str(d.get("shaper", "")),
            shaper_params=dict(d.get("shaper_params") or {}),
            speedup_weight=float(d.get("speedup_weight", 0.5)),
            speedup_cap=float(d.get("speedup_cap", 2.0)),
            episode_return=float(d.get("episode_return", 0.0)),
            terminated=bool(d.get("terminated", False)),
            truncated=bool(d.get("truncated", False)),
            group=d.get("group"),
            meta=dict(d.get("meta") or {}),
        )


class RecordEpisodes(gym.Wrapper[str, str, str, str]):
    """Append every finished episode of a ``KernelGen`` env to a JSONL file, one line per episode.

    The line is written (and the file closed) when ``step`` returns ``terminated`` or ``truncated``, so a crash
    loses at most the episode in progress, and several recorders may append to one file. An episode abandoned by
    an early ``reset`` is not written.

    Args:
        env: A ``KernelGen`` env (possibly wrapped).
        path: JSONL file to append to (created with its parent directories).
        group: Default group label of the episodes; ``reset(options={"group": ...})`` sets it per episode.
        meta: Extra JSON-safe details stored with every episode.
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        path: str | os.PathLike[str],
        group: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(env)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.default_group = group
        self.meta = dict(meta or {})
        self.episodes_written = 0
        self._turns: list[dict[str, Any]] = []
        self._seed: int | None = None
        self._group: str | None = group
        self._task_id = ""
        self._info0: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Reset the env and start buffering a new episode (``options["group"]`` labels it)."""
        opts = dict(options or {})
        self._group = opts.pop("group", self.default_group)
        obs, info = self.env.reset(seed=seed, options=opts or None)
        if self._turns:
            log.debug("RecordEpisodes: an unfinished episode of %s was dropped", self._task_id)
        self._turns = []
        self._seed = seed
        self._task_id = str(info.get("task_id", ""))
        self._info0 = info
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Step the env; on the episode's last step, append its line to the file."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._turns.append(
            {
                "response": action if isinstance(action, str) else repr(action),
                "eval": info.get("eval", {}),
                "score": info.get("score"),
                "reward": float(reward),
            }
        )
        if terminated or truncated:
            self._write(self._record(info, terminated, truncated))
            self._turns = []
        return obs, float(reward), terminated, truncated, info

    def _record(self, info: dict[str, Any], terminated: bool, truncated: bool) -> EpisodeRecord:
        base = self.env.unwrapped
        shaper = getattr(base, "shaper", None)
        reward_cfg = getattr(getattr(base, "config", None), "reward", None)
        rewards = list(info.get("turn_rewards") or [0.0] * len(self._turns))
        weights = list(info.get("loss_weights") or [0.0] * len(self._turns))
        turns = tuple(
            TurnRecord(
                turn=k + 1,
                response=t["response"],
                eval=t["eval"],
                score=_opt_float(t["score"]),
                reward=t["reward"],
                turn_reward=float(rewards[k]),
                loss_weight=float(weights[k]),
            )
            for k, t in enumerate(self._turns)
        )
        meta: dict[str, Any] = {k: self._info0[k] for k in ("backend", "tier") if k in self._info0}
        return EpisodeRecord(
            task_id=self._task_id,
            seed=self._seed,
            episode=self.episodes_written,
            turns=turns,
            shaper=str(getattr(shaper, "name", "")),
            shaper_params=shaper.params() if shaper is not None else {},
            speedup_weight=float(getattr(reward_cfg, "speedup_weight", 0.5)),
            speedup_cap=float(getattr(reward_cfg, "speedup_cap", 2.0)),
            episode_return=float(info.get("episode_return", sum(t.reward for t in turns))),
            terminated=bool(terminated),
            truncated=bool(truncated),
            group=self._group,
            meta={**meta, **self.meta},
        )

    def _write(self, record: EpisodeRecord) -> None:
        line = json.dumps(record.to_dict(), allow_nan=False, separators=(",", ":"))
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        self.episodes_written += 1


def _parse_lines(path: Path) -> Iterator[EpisodeRecord]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    # The last element is "" when the file ends with a newline; a non-empty one is a line cut short.
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = EpisodeRecord.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError) as e:
            if i == last:
                log.warning("%s: skipped a truncated last line (%d characters): %s", path, len(line), e)
                return
            raise MusaEnvError(
                f"{path}:{i + 1}: expected one JSON episode record per line, found an unreadable line ({e}); "
                "only the last line may be cut short."
            ) from None
        yield record


def iter_episodes(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> Iterator[EpisodeRecord]:
    """Episodes of one or more JSONL files, in file order.

    A truncated last line (a writer killed mid-line) is skipped with a warning; any other unreadable line raises.

    Raises:
        MusaEnvError: a file is missing, or a line other than the last is not a valid record.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise MusaEnvError(f"trajectory file {str(path)!r} does not exist; record one with RecordEpisodes.")
        yield from _parse_lines(path)


def read_episodes(path: str | os.PathLike[str]) -> list[EpisodeRecord]:
    """All episodes of one JSONL file (see :func:`iter_episodes`)."""
    return list(iter_episodes(path))
