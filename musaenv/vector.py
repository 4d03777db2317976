"""Vector environments of ``KernelGen-v0`` that evaluate their sub-environments' responses concurrently.

* ``gym.make_vec("KernelGen-v0", num_envs=N)`` (no ``vectorization_mode``) builds a :class:`KernelGenVectorEnv`
  through the registered ``vector_entry_point``: N envs in this process sharing **one**
  :class:`~musaenv.evaluator.pool.EvaluatorPool`, with each ``step`` evaluating the N responses at once.
* ``vectorization_mode="sync"``: Gymnasium's ``SyncVectorEnv``; pass ``evaluator=pool`` to share one evaluator,
  otherwise each env creates its own on first use.
* ``vectorization_mode="async"``: one process per env, each with its own evaluator; what they share is the
  on-disk cache (built extensions, precompiled headers, binding objects, reference timings), so a module one env
  built is a cache hit for the others. Text observations cross processes through shared memory that
  :class:`PromptText` makes work (Gymnasium's own ``Text`` shared memory is read once, at construction).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

__all__ = ["KernelGenVectorEnv", "PromptText", "SharedTextBatch", "make_env", "make_vector_env"]


class PromptText(spaces.Text):
    """``Text`` whose batches can live in shared memory (length-prefixed UTF-32 code points per env)."""


class SharedTextBatch(Sequence[str]):
    """A live view of N strings in shared memory (``AsyncVectorEnv`` reads its buffer object once and keeps it)."""

    def __init__(self, buffer: Any, n: int, max_length: int) -> None:
        self._buffer, self._n, self._width = buffer, n, max_length + 1

    def _rows(self) -> np.ndarray:
        return np.frombuffer(self._buffer.get_obj(), dtype=np.int32).reshape(self._n, self._width)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(self._n)))
        row = self._rows()[i]
        return row[1 : 1 + int(row[0])].tobytes().decode("utf-32-le")

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(self._n))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"SharedTextBatch({tuple(s[:40] for s in self)!r})"


@create_shared_memory.register(PromptText)
def _create_prompt_memory(space: PromptText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@read_from_shared_memory.register(PromptText)
def _read_prompt_memory(space: PromptText, shared_memory: Any, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(shared_memory, n, space.max_length)


@write_to_shared_memory.register(PromptText)
def _write_prompt_memory(space: PromptText, index: int, value: str, shared_memory: Any) -> None:
    codes = np.frombuffer(str(value)[: space.max_length].encode("utf-32-le"), dtype=np.int32)
    rows = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(-1, space.max_length + 1)
    rows[index, 0] = len(codes)
    rows[index, 1 : 1 + len(codes)] = codes


def make_env(**kwargs: Any) -> gym.Env[str, str]:
    """Entry point of ``KernelGen-v0``: a :class:`~musaenv.env.KernelGenEnv` whose observation space is
    :class:`PromptText` (same limits and charset), so ``AsyncVectorEnv``'s shared memory carries it correctly."""
    from musaenv.env import KernelGenEnv

    env = KernelGenEnv(**kwargs)
    space = env.observation_space
    assert isinstance(space, spaces.Text)
    env.observation_space = PromptText(max_length=space.max_length, min_length=space.min_length,
                                       charset=space.character_set)  # fmt: skip
    return env


_DICT_OR_NONE = ("timing", "ref_timing")  # EvalResult fields that are a dict or None


class KernelGenVectorEnv(SyncVectorEnv):
    """N ``KernelGenEnv`` in this process sharing one evaluator; ``step`` evaluates the N responses concurrently.

    Same semantics as ``SyncVectorEnv`` (autoreset modes included): sub-env steps run in threads (each blocks on
    the shared pool), then the usual bookkeeping runs in order. Closing it closes the pool it created.
    """

    def __init__(self, env_fns: Sequence[Any], evaluator: Any = None, owns_evaluator: bool = False, **kw: Any) -> None:
        super().__init__([_wrapped(f) for f in env_fns], **kw)
        self._threads = ThreadPoolExecutor(max(1, len(env_fns)), thread_name_prefix="musaenv-vec")
        self._shared = evaluator
        self._owns = owns_evaluator

    def step(self, actions: Any) -> Any:
        """Step every env; the evaluations of their responses overlap."""
        acts = list(actions)
        next_step = self.autoreset_mode == gym.vector.AutoresetMode.NEXT_STEP
        todo = [i for i in range(self.num_envs) if not (next_step and self._autoreset_envs[i])]
        envs: list[_Prestep] = self.envs  # type: ignore[assignment]
        outcomes = list(self._threads.map(lambda i: envs[i].env.step(acts[i]), todo))
        for i, outcome in zip(todo, outcomes):
            envs[i].pending = outcome
        return super().step(actions)

    def _add_info(self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int) -> dict[str, Any]:
        # Gymnasium merges nested dicts key by key and fails when one env's value is a dict and an earlier env's is
        # None (an EvalResult's ``timing`` of a correct candidate beside a failed one's): batch those as empty dicts.
        ev = env_info.get("eval")
        if isinstance(ev, dict) and any(ev.get(k, 0) is None for k in _DICT_OR_NONE):
            env_info = {**env_info, "eval": {**ev, **{k: {} for k in _DICT_OR_NONE if k in ev and ev[k] is None}}}
        return super()._add_info(vector_infos, env_info, env_num)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs, the stepping threads and (when created here) the shared pool."""
        from musaenv.evaluator.interrupt import interrupted

        if interrupted() and hasattr(self._shared, "abort"):  # Ctrl-C: stop the running evaluations, not wait
            self._shared.abort()
        super().close_extras(**kwargs)
        self._threads.shutdown(wait=True)
        if self._owns and self._shared is not None:
            self._shared.close()


def _wrapped(fn: Any) -> Any:
    return lambda: _Prestep(fn())


class _Prestep(gym.Wrapper[str, str, str, str]):
    """Returns a step result computed ahead (concurrently) by :class:`KernelGenVectorEnv`."""

    pending: tuple[Any, ...] | None = None

    def step(self, action: str) -> Any:
        out, self.pending = self.pending, None
        return out if out is not None else self.env.step(action)


def make_vector_env(num_envs: int = 1, evaluator: Any = None, compile_workers: int | None = None, **kwargs: Any
                    ) -> KernelGenVectorEnv:  # fmt: skip
    """Registered ``vector_entry_point``: N envs sharing one :class:`~musaenv.evaluator.pool.EvaluatorPool`.

    Args:
        num_envs: Number of sub-environments.
        evaluator: A shared evaluator to use (not closed here); default: a new pool sized for ``num_envs``.
        compile_workers: Builds at once in the new pool (default: per cores and memory).
        **kwargs: ``KernelGenEnv`` arguments (``task``, ``backend``, ``eval_config``, ...).
    """
    owns = evaluator is None
    if owns:
        from musaenv.config import EvalConfig
        from musaenv.evaluator.pool import EvaluatorPool

        env_cfg = kwargs.get("config")
        eval_cfg = kwargs.get("eval_config") or (env_cfg.eval if env_cfg is not None else EvalConfig())
        evaluator = EvaluatorPool(kwargs.get("backend", "auto"), eval_cfg, compile_workers=compile_workers,
                                  max_in_flight=num_envs)  # fmt: skip
    fns = [lambda: make_env(evaluator=evaluator, **kwargs) for _ in range(num_envs)]
    return KernelGenVectorEnv(fns, evaluator=evaluator, owns_evaluator=owns)
