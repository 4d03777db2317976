"""The :class:`RewardShaper` interface and the shaper registry. Pure Python, no torch.

A shaper turns the per-turn scores s_1..s_T of one episode (see :mod:`musaenv.rewards.score`) into per-turn
rewards. ``None`` marks a masked turn (an ``infra_error``: the harness failed, not the policy). Every shaper treats
masked turns as if they had never happened: the shaping rule runs on the unmasked turns only, masked turns get
reward 0 and loss weight 0, and they never count as failures. "Turn 1" of a rule is the first unmasked turn.

Semantics of the outputs, shared by every shaper:

* ``episode_rewards(scores)[k]`` is the credit of turn k; its sum is the episode return an env reports.
  Shapers whose rewards already include future turns (``kevin``, ``tcpo``) are meant to be used per turn as they
  are; for the others a trainer may form returns-to-go itself.
* ``loss_weights(scores)[k]`` says whether turn k's tokens enter the policy-gradient loss (and with what weight).
* ``causal`` is True when turn k's credit depends only on turns <= k (a statement about credit assignment).
* ``online`` is True when the return of the turns played so far is the shaper's return had the episode ended there
  (every built-in shaper). An env then pays online: at step t it pays R_t - R_{t-1}, R_t the return of turns 1..t
  (:meth:`RewardShaper.step_reward`), so after every step the rewards paid sum to the return of the turns played,
  whoever ends the episode (the env itself, ``gymnasium.wrappers.TimeLimit``, a server session closed early). The
  rewards paid per step are not the per-turn credit: PrimeEcho's credit sits on turn 1, its payments follow R_t.
  A shaper with ``online = False`` is paid 0 until the env's own last step and then its whole return; an episode
  ended from outside before that returns 0.
"""

from __future__ import annotations

import abc
import importlib
import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from musaenv.config import RewardConfig
from musaenv.errors import ConfigError
from musaenv.types import EvalResult

__all__ = [
    "Results",
    "RewardShaper",
    "Scores",
    "available_shapers",
    "check_param",
    "check_scores",
    "make_shaper",
    "register_shaper",
    "shaper_from_config",
    "shaper_kwargs",
]

Scores = Sequence[float | None]
Results = Sequence[EvalResult | None]
S = TypeVar("S", bound="type[RewardShaper]")

# Modules whose import registers the built-in shapers (imported lazily to avoid a cycle with this module).
_BUILTIN_MODULES = ("musaenv.rewards.shapers", "musaenv.rewards.external", "musaenv.rewards.tcpo")
_REGISTRY: dict[str, type[RewardShaper]] = {}


def check_param(
    owner: str,
    name: str,
    value: object,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
) -> float:
    """Validate one numeric shaper parameter and return it as a float.

    Args:
        owner: Shaper name, for the message.
        name: Parameter name, for the message.
        value: The value given.
        lo: Smallest allowed value (inclusive unless ``lo_open``), or ``None``.
        hi: Largest allowed value (inclusive), or ``None``.
        lo_open: Make ``lo`` exclusive.

    Raises:
        ConfigError: The value is not a finite real number in range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ConfigError(f"reward shaper {owner!r}: expected {name} to be a finite number, found {value!r}.")
    x = float(value)
    too_low = lo is not None and (x <= lo if lo_open else x < lo)
    too_high = hi is not None and x > hi
    if too_low or too_high:
        lo_txt = "-inf" if lo is None else f"{lo:g}"
        hi_txt = "inf" if hi is None else f"{hi:g}"
        bracket = "(" if lo_open else "["
        raise ConfigError(f"reward shaper {owner!r}: expected {name} in {bracket}{lo_txt}, {hi_txt}], found {x!r}.")
    return x


def check_scores(scores: Scores) -> list[float | None]:
    """Validate per-turn scores (finite numbers or ``None``) and return them as floats."""
    out: list[float | None] = []
    for k, s in enumerate(scores):
        if s is None:
            out.append(None)
        elif isinstance(s, numbers.Real) and not isinstance(s, bool) and math.isfinite(s):
            out.append(float(s))
        else:
            raise ConfigError(f"reward shaper: expected each score to be a finite number or None, turn {k} is {s!r}.")
    return out


def _check_results(results: Results | None, n: int) -> list[EvalResult | None] | None:
    if results is None:
        return None
    if len(results) != n:
        raise ConfigError(f"reward shaper: expected one result per score ({n}), found {len(results)}.")
    return list(results)


class RewardShaper(abc.ABC):
    """Per-turn rewards from per-turn scores; subclass and implement :meth:`_shape`.

    Class attributes:
        name: Registry name.
        causal: Turn k's credit depends only on turns <= k.
        online: The return of a prefix of turns is the return had the episode ended there, so an env pays
            R_t - R_{t-1} at step t (:meth:`step_reward`). Set False only for a rule whose return is defined for
            whole episodes alone; the env then pays it at its own last step, and a truncation from outside pays 0.
        needs_group: :meth:`group_rewards` differs from :meth:`episode_rewards` applied to each episode.
        uses_results: The shaper reads ``EvalResult`` fields (stage, speedup) when given; without them it derives
            what it needs from the scores (documented per shaper).
    """

    name: ClassVar[str] = ""
    causal: ClassVar[bool] = False
    online: ClassVar[bool] = True
    needs_group: ClassVar[bool] = False
    uses_results: ClassVar[bool] = False

    def __init__(self) -> None:
        self._params: dict[str, Any] = {}

    @abc.abstractmethod
    def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
        """Rewards of the unmasked turns (``scores`` has no ``None``; ``results`` is aligned with it)."""

    def episode_rewards(self, scores: Scores, results: Results | None = None) -> list[float]:
        """Per-turn rewards of one episode; masked turns (``None``) get 0.

        Args:
            scores: s_1..s_T, ``None`` for a masked turn.
            results: The turns' :class:`EvalResult` records (same length), or ``None``.

        Returns:
            One float per turn; the sum is the episode return.
        """
        checked = check_scores(scores)
        res = _check_results(results, len(checked))
        idx = [k for k, s in enumerate(checked) if s is not None]
        out = [0.0] * len(checked)
        if not idx:
            return out
        values = [s for s in checked if s is not None]
        sub = [res[k] for k in idx] if res is not None else None
        for k, r in zip(idx, self._shape(values, sub), strict=True):
            out[k] = float(r)
        return out

    def episode_return(self, scores: Scores, results: Results | None = None) -> float:
        """Sum of :meth:`episode_rewards`."""
        return math.fsum(self.episode_rewards(scores, results))

    def loss_weights(self, scores: Scores) -> list[float]:
        """Per-turn loss weights: 1 for every unmasked turn, 0 for masked ones (overridden by PrimeEcho)."""
        return [0.0 if s is None else 1.0 for s in check_scores(scores)]

    def group_rewards(
        self, groups: Sequence[Scores], results: Sequence[Results | None] | None = None
    ) -> list[list[float]]:
        """Per-turn rewards of G episodes of one task (default: :meth:`episode_rewards` on each).

        Args:
            groups: G score sequences (episodes may have different lengths).
            results: G result sequences aligned with ``groups``, or ``None``.
        """
        if results is not None and len(results) != len(groups):
            raise ConfigError(
                f"reward shaper: expected one result list per episode ({len(groups)}), found {len(results)}."
            )
        return [self.episode_rewards(g, None if results is None else results[i]) for i, g in enumerate(groups)]

    def step_reward(self, scores: Scores, results: Results | None = None, *, done: bool = False) -> float:
        """Reward an env pays at the latest turn, given the scores so far.

        Online shapers pay R_t - R_{t-1}, R_t being :meth:`episode_return` of turns 1..t, so the rewards paid
        after any step sum to the return of the turns played (``done`` is not needed). A shaper that is not
        online pays 0 until ``done`` and then the whole return.
        """
        if not scores:
            raise ConfigError("reward shaper: step_reward needs the scores of at least one turn.")
        if self.online:
            before = self.episode_return(scores[:-1], None if results is None else results[:-1])
            return self.episode_return(scores, results) - before
        return self.episode_return(scores, results) if done else 0.0

    def paid_rewards(self, scores: Scores, results: Results | None = None, *, done: bool = True) -> list[float]:
        """What an env pays at each step of an episode with these turns (:meth:`step_reward` step by step).

        Args:
            scores: s_1..s_t of the turns played.
            results: Their records, or ``None``.
            done: Whether the env itself ended the episode at turn t (matters only for shapers not online).
        """
        n = len(scores)
        return [
            self.step_reward(scores[: k + 1], None if results is None else results[: k + 1], done=done and k == n - 1)
            for k in range(n)
        ]

    def params(self) -> dict[str, Any]:
        """The shaper's parameters (JSON-safe), for logs and reproducibility."""
        return dict(self._params)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params.items())
        return f"{type(self).__name__}({args})"


def register_shaper(cls: S) -> S:
    """Class decorator: add a :class:`RewardShaper` subclass to the registry under ``cls.name``.

    Its parameters must be keyword-only arguments of ``__init__`` (``def __init__(self, *, alpha: float = 0.75)``):
    :func:`make_shaper` validates keywords against them.
    """
    if not cls.name:
        raise ConfigError(f"reward shaper class {cls.__name__} has no name.")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ConfigError(f"reward shaper name {cls.name!r} is already registered by {_REGISTRY[cls.name].__name__}.")
    _REGISTRY[cls.name] = cls
    return cls


def _ensure_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def available_shapers() -> list[str]:
    """Names accepted by :func:`make_shaper`, sorted."""
    _ensure_builtins()
    return sorted(_REGISTRY)


def _lookup(name: str) -> type[RewardShaper]:
    _ensure_builtins()
    cls = _REGISTRY.get(name)
    if cls is None:
        raise ConfigError(f"unknown reward shaper {name!r}; known shapers: {', '.join(sorted(_REGISTRY))}.")
    return cls


def shaper_kwargs(name: str) -> dict[str, Any]:
    """Keyword arguments a shaper accepts, with their defaults."""
    init: Callable[..., Any] = _lookup(name).__init__
    params = inspect.signature(init).parameters.values()
    return {p.name: p.default for p in params if p.name != "self" and p.kind is p.KEYWORD_ONLY}


def make_shaper(name: str, **kwargs: Any) -> RewardShaper:
    """Build a registered shaper by name.

    Raises:
        ConfigError: Unknown name (the message lists the known ones), unknown keyword (the message lists the
            accepted ones) or a parameter out of range.
    """
    cls = _lookup(name)
    accepted = shaper_kwargs(name)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ConfigError(
            f"reward shaper {name!r} got unknown keyword(s) {unknown}; it accepts {sorted(accepted) or 'none'}."
        )
    return cls(**kwargs)


def shaper_from_config(config: RewardConfig) -> RewardShaper:
    """Build ``config.shaper`` with ``config.shaper_kwargs``.

    Shapers that convert scores back to speedups (``kevin``, ``kernelgym``, ``kernrl``, ``tcpo``) take
    ``speedup_weight`` and ``speedup_cap`` from the config, so they invert the same s(c) the env computes.

    Raises:
        ConfigError: As :func:`make_shaper`, or ``shaper_kwargs`` sets ``speedup_weight``/``speedup_cap`` to a value
            different from the config's.
    """
    kwargs = dict(config.shaper_kwargs)
    accepted = shaper_kwargs(config.shaper)
    for key in ("speedup_weight", "speedup_cap"):
        value = getattr(config, key)
        if key in kwargs and kwargs[key] != value:
            raise ConfigError(
                f"RewardConfig: shaper_kwargs[{key!r}]={kwargs[key]!r} differs from {key}={value!r}; set it once, "
                f"in RewardConfig.{key}."
            )
        if key in accepted:
            kwargs[key] = value
    return make_shaper(config.shaper, **kwargs)
