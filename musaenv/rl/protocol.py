"""The plugin boundary between musaenv and a policy optimizer: two protocols and four JSON-safe records.

A *policy* turns prompts into sampled responses (:class:`Policy`); an *optimizer* turns a batch of scored episodes
into a parameter update (:class:`Optimizer`). One object may be both (the reference
:class:`musaenv.rl.grpo.GRPOTrainer` is). Between them travel plain records:

* :class:`Generation`: one sampled response (text, and when the policy knows them, its token ids and the sampling
  policy's per-token log-probabilities, which off-policy corrections such as MirrorPop need);
* :class:`Turn`: one env step (the prompt the policy saw, its response, the verifier's verdict, score, shaped reward
  and loss weight);
* :class:`Episode`: the turns of one env episode and its return;
* :class:`EpisodeGroup`: the episodes sampled for one prompt and their group-relative advantages;
* :class:`EpisodeBatch`: the groups of one optimizer step.

No torch here: every record round-trips through ``to_dict`` / ``from_dict`` and ``json``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Union, runtime_checkable

__all__ = [
    "Episode",
    "EpisodeBatch",
    "EpisodeGroup",
    "Generation",
    "Message",
    "Optimizer",
    "Policy",
    "Prompt",
    "Turn",
]

Message = dict[str, str]
"""A chat message, ``{"role": ..., "content": ...}``."""

Prompt = Union[str, list[Message]]  # noqa: UP007 -- a runtime alias; ``X | Y`` of generics needs Python 3.10 care
"""What a policy is asked to continue: plain text (an env observation) or a list of chat messages."""


def _opt_tuple(xs: Sequence[Any] | None, cast: type) -> tuple[Any, ...] | None:
    return None if xs is None else tuple(cast(x) for x in xs)


def _opt_list(xs: Sequence[Any] | None) -> list[Any] | None:
    return None if xs is None else list(xs)


def _prompt_copy(prompt: Prompt) -> Prompt:
    return prompt if isinstance(prompt, str) else [dict(m) for m in prompt]


def _set_tokens(rec: Any, what: str) -> None:
    """Normalise a frozen record's ``token_ids`` / ``logprobs`` to tuples and check they pair up."""
    object.__setattr__(rec, "token_ids", _opt_tuple(rec.token_ids, int))
    object.__setattr__(rec, "logprobs", _opt_tuple(rec.logprobs, float))
    if rec.token_ids is not None and rec.logprobs is not None and len(rec.token_ids) != len(rec.logprobs):
        raise ValueError(
            f"{what}: expected as many logprobs as token ids, found {len(rec.logprobs)} logprobs for "
            f"{len(rec.token_ids)} tokens. Pass one log-probability per sampled token."
        )


@dataclass(frozen=True)
class Generation:
    """One sampled response.

    Attributes:
        text: The decoded response.
        token_ids: The sampled token ids (special tokens included, e.g. a final EOS), or ``None`` when the policy
            does not expose tokens (an API model).
        logprobs: Per-token log-probabilities of ``token_ids`` under the sampling policy, same length, or ``None``.
        finish_reason: ``"stop"`` (an end-of-sequence token was sampled), ``"length"`` (the token budget ran out),
            or ``None`` when unknown.
    """

    text: str
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        _set_tokens(self, "Generation")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "text": self.text,
            "token_ids": _opt_list(self.token_ids),
            "logprobs": _opt_list(self.logprobs),
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Generation:
        """Inverse of :meth:`to_dict`."""
        return cls(d["text"], d.get("token_ids"), d.get("logprobs"), d.get("finish_reason"))


@dataclass(frozen=True)
class Turn:
    """One env step of an episode.

    Attributes:
        prompt: What the policy was given (the env observation, or a repair prompt on a BDR turn).
        response: The policy's response text (the env action).
        eval: The verifier's :class:`musaenv.types.EvalResult` as a dict (``info["eval"]``); empty when unknown.
        score: The per-candidate score s(c), ``None`` when the turn was not scored (an infra error).
        reward: The shaper's reward for this turn (``info["turn_rewards"][k]``); the rewards of an episode's turns
            sum to its return.
        loss_weight: How much this turn's tokens count in the policy loss (PrimeEcho: 1 for the first turn, 0 after).
        token_ids: The response's token ids, when the policy exposed them.
        logprobs: The sampling policy's per-token log-probabilities of ``token_ids``, when known.
    """

    prompt: Prompt
    response: str
    eval: dict[str, Any] = field(default_factory=dict)
    score: float | None = None
    reward: float = 0.0
    loss_weight: float = 1.0
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        _set_tokens(self, "Turn")

    @property
    def stage(self) -> str | None:
        """The verifier's final stage name (``"correct"``, ``"compile_error"``, ...), ``None`` when unknown."""
        stage = self.eval.get("stage")
        return None if stage is None else str(stage)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict (``eval`` is assumed JSON-safe, as ``EvalResult.to_dict`` makes it)."""
        return {
            "prompt": _prompt_copy(self.prompt),
            "response": self.response,
            "eval": dict(self.eval),
            "score": self.score,
            "reward": self.reward,
            "loss_weight": self.loss_weight,
            "token_ids": _opt_list(self.token_ids),
            "logprobs": _opt_list(self.logprobs),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Turn:
        """Inverse of :meth:`to_dict`."""
        return cls(
            prompt=_prompt_copy(d["prompt"]),
            response=d["response"],
            eval=dict(d.get("eval") or {}),
            score=d.get("score"),
            reward=float(d.get("reward", 0.0)),
            loss_weight=float(d.get("loss_weight", 1.0)),
            token_ids=d.get("token_ids"),
            logprobs=d.get("logprobs"),
        )


@dataclass(frozen=True)
class Episode:
    """One env episode.

    Attributes:
        task_id: The task the episode ran on.
        seed: The seed passed to ``env.reset``.
        turns: The episode's steps, in order.
        return_: The episode return (the sum of the turns' rewards).
    """

    task_id: str
    seed: int | None
    turns: tuple[Turn, ...]
    return_: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", tuple(self.turns))

    @property
    def solved(self) -> bool:
        """True when some turn's candidate was judged ``correct``."""
        return any(t.stage == "correct" for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "task_id": self.task_id,
            "seed": self.seed,
            "turns": [t.to_dict() for t in self.turns],
            "return_": self.return_,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Episode:
        """Inverse of :meth:`to_dict`."""
        return cls(d["task_id"], d.get("seed"), tuple(Turn.from_dict(t) for t in d["turns"]), float(d["return_"]))


@dataclass(frozen=True)
class EpisodeGroup:
    """The episodes sampled for one prompt, with one advantage per episode.

    Attributes:
        task_id: The task all episodes ran on.
        episodes: The group's episodes.
        advantages: One group-relative advantage per episode (e.g. GRPO's normalised return).
        source: ``"task"`` for a fresh task, ``"repair"`` for a Buffered-Dynamic-Retry repair prompt.
    """

    task_id: str
    episodes: tuple[Episode, ...]
    advantages: tuple[float, ...]
    source: str = "task"

    def __post_init__(self) -> None:
        object.__setattr__(self, "episodes", tuple(self.episodes))
        object.__setattr__(self, "advantages", tuple(float(a) for a in self.advantages))
        if len(self.episodes) != len(self.advantages):
            raise ValueError(
                f"EpisodeGroup({self.task_id!r}): expected one advantage per episode, found "
                f"{len(self.advantages)} advantages for {len(self.episodes)} episodes."
            )
        if not all(math.isfinite(a) for a in self.advantages):
            raise ValueError(f"EpisodeGroup({self.task_id!r}): advantages must be finite, found {self.advantages}.")

    @property
    def returns(self) -> tuple[float, ...]:
        """The episodes' returns, in order."""
        return tuple(e.return_ for e in self.episodes)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "task_id": self.task_id,
            "episodes": [e.to_dict() for e in self.episodes],
            "advantages": list(self.advantages),
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EpisodeGroup:
        """Inverse of :meth:`to_dict`."""
        episodes = tuple(Episode.from_dict(e) for e in d["episodes"])
        return cls(d["task_id"], episodes, tuple(d["advantages"]), d.get("source", "task"))


@dataclass(frozen=True)
class EpisodeBatch:
    """The groups of one optimizer step.

    Attributes:
        groups: The episode groups.
    """

    groups: tuple[EpisodeGroup, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))

    def episodes(self) -> Iterator[tuple[Episode, float]]:
        """Yield every episode with its advantage."""
        for g in self.groups:
            yield from zip(g.episodes, g.advantages)

    @property
    def mean_return(self) -> float:
        """Mean episode return over the batch (``nan`` when empty)."""
        rets = [e.return_ for e, _ in self.episodes()]
        return sum(rets) / len(rets) if rets else math.nan

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {"groups": [g.to_dict() for g in self.groups]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EpisodeBatch:
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(EpisodeGroup.from_dict(g) for g in d["groups"]))


@runtime_checkable
class Policy(Protocol):
    """Something that samples responses to prompts.

    ``generate(prompts, num_samples=n)`` returns one list per prompt, each holding ``n`` :class:`Generation` s, in
    prompt order. Extra keyword arguments are policy-specific (e.g. ``temperature``); a policy ignores the ones it
    does not know rather than failing.
    """

    def generate(
        self, prompts: Sequence[Prompt], *, num_samples: int = 1, **kw: Any
    ) -> list[list[Generation]]:  # pragma: no cover - protocol
        """Sample ``num_samples`` responses for each prompt."""
        ...


@runtime_checkable
class Optimizer(Protocol):
    """Something that updates a policy from scored episodes.

    ``update(batch)`` consumes an :class:`EpisodeBatch` and returns scalar metrics (``{"loss": ..., ...}``) for
    logging. It may assume the batch was sampled by the policy it optimizes, and should say in its metrics how much
    of the batch it used (e.g. ``"n_sequences"``).
    """

    def update(self, batch: EpisodeBatch) -> dict[str, float]:  # pragma: no cover - protocol
        """Take one optimization step on ``batch``; return metrics."""
        ...
