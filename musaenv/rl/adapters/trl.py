"""KernelGen-v0 as a TRL ``environment_factory`` class: one ``submit_kernel`` tool, environment-owned reward.

The contract, as TRL 1.16's ``GRPOTrainer`` implements it (``trl/trainer/grpo_trainer.py``):

* ``Cls()`` takes no arguments (configuration comes from the enclosing scope): :func:`make_trl_environment`
  returns such a class with the env's settings bound as class attributes. Instances are pooled and reused across
  batches (constructed once, reset often).
* ``reset(self, **kwargs)`` is called at the start of each episode with the dataset row's columns; the string it
  returns is appended to the last user message of the row's ``prompt``: here the KernelGen-v0 task prompt, its
  last paragraph asking for a ``submit_kernel`` call (the tool's contract) instead of a fenced block; a ``task``
  column picks the task, a ``seed`` column the seed. The rows therefore carry only a short instruction
  (:func:`trl_dataset_rows`, ``musaenv dataset --trainer trl``), so the model sees the task prompt once; a row
  that already holds a task prompt (``musaenv dataset`` for chat trainers) is refused with that advice.
* Every other public method except ``get_reward`` is exposed to the model as a tool, its schema built from the type
  hints and the ``Args:`` section of its docstring: here only :meth:`KernelGenToolEnv.submit_kernel`. A tool that
  raises has its message fed back to the model.
* ``get_reward()`` makes the environment own the reward: TRL adds it as a reward source of weight 1 by itself, so
  **no** ``reward_funcs`` is needed, and passing :func:`trl_reward_func` as well would count the reward twice.

The reward of a rollout is the episode's shaped return over the submissions it made, as if the episode ended
there; a rollout that never called ``submit_kernel`` is scored like one ``format_error`` submission (the worst
verdict, -1 under PrimeEcho), so staying silent never pays more than a failed attempt. TRL is not imported here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from musaenv.backends import get_backend
from musaenv.env import Evaluator, KernelGenEnv
from musaenv.errors import ConfigError
from musaenv.tasks.prompts import SUBMIT_TOOL, answer_line, feedback_text, tool_instruction
from musaenv.types import EvalResult, Stage

__all__ = [
    "DEFAULT_INSTRUCTION",
    "TOOL_NAME",
    "KernelGenToolEnv",
    "close_trl_environment",
    "make_trl_environment",
    "tool_prompt",
    "trl_dataset_rows",
    "trl_reward_func",
]

log = logging.getLogger(__name__)

TOOL_NAME = SUBMIT_TOOL
DEFAULT_INSTRUCTION = tool_instruction(TOOL_NAME)
"""The user message of :func:`trl_dataset_rows`; the task prompt itself comes from ``reset``."""
_TASK_PROMPT_MARK = "Reference program:"  # a paragraph of every task prompt (musaenv.tasks.prompts.initial_prompt)


def _row_text(prompt: Any) -> str:
    """The text of a row's ``prompt`` column (chat messages or a plain string)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return ""


def tool_prompt(task_prompt: str, backend: str) -> str:
    """The task prompt with its answer paragraph asking for a ``submit_kernel`` call instead of a fenced block."""
    record = get_backend(backend, strict=False)
    fenced, tool = answer_line(record), answer_line(record, tool=TOOL_NAME)
    if fenced not in task_prompt:  # a prompt of another shape: say the tool's contract at the end
        return f"{task_prompt}\n\n{tool}"
    return task_prompt.replace(fenced, tool)


class KernelGenToolEnv:
    """One KernelGen-v0 episode per TRL generation; the model submits programs through ``submit_kernel``.

    Use :func:`make_trl_environment` to get a configured subclass; this base class runs the built-in suite on the
    ``auto`` backend. All instances of one class share one evaluator (build and reference-timing caches, worker
    pool), created at the first ``reset`` unless one was given.

    Attributes:
        reward: What :meth:`get_reward` answers: the shaped return of the submissions so far, as if the episode
            ended now (final once ``done``); the worst verdict's return before any submission.
        done: Whether the episode ended (a ``correct`` verdict or ``max_turns`` submissions).
        last_info: The env's info dict of the last submission (``eval``, ``score``, ...), ``{}`` before one.
        task_id: The current episode's task.
    """

    env_kwargs: ClassVar[dict[str, Any]] = {}
    """Keyword arguments of :class:`~musaenv.env.KernelGenEnv` (``task``, ``backend``, ``max_turns``, ...)."""
    shared_evaluator: ClassVar[Evaluator | None] = None
    """The evaluator every instance uses; created at the first ``reset`` when ``None``."""
    _owns_evaluator: ClassVar[bool] = True

    def __init__(self) -> None:
        self._env: KernelGenEnv | None = None
        self._scores: list[float | None] = []
        self._results: list[EvalResult] = []
        self.reward = 0.0
        self.done = False
        self.last_info: dict[str, Any] = {}
        self.task_id: str | None = None

    @classmethod
    def _evaluator(cls) -> Evaluator:
        if cls.shared_evaluator is None:
            from musaenv.evaluator.local import LocalEvaluator

            kw = cls.env_kwargs
            cls.shared_evaluator = LocalEvaluator(kw.get("backend", "auto"), kw.get("eval_config"))
        return cls.shared_evaluator

    def _make_env(self) -> KernelGenEnv:
        kw = {k: v for k, v in self.env_kwargs.items() if k != "evaluator"}
        return KernelGenEnv(**kw, evaluator=self._evaluator())

    def reset(self, **kwargs: Any) -> str:
        """Start an episode; returns the task prompt. ``task`` and ``seed`` dataset columns are honoured.

        Raises:
            ConfigError: The row's ``prompt`` already holds a task prompt (TRL appends this one to it).
        """
        row_text = _row_text(kwargs.get("prompt"))
        if _TASK_PROMPT_MARK in row_text:
            raise ConfigError(
                "this dataset row already holds the task prompt, and TRL appends reset()'s task prompt to it (the "
                "model would read it twice, asked for a fenced block): write TRL rows with trl_dataset_rows() or "
                "`musaenv dataset --trainer trl`"
            )
        if self._env is None:
            self._env = self._make_env()
        options = {"task": kwargs["task"]} if kwargs.get("task") is not None else None
        seed = kwargs.get("seed")
        obs, info = self._env.reset(seed=None if seed is None else int(seed), options=options)
        self._scores, self._results = [], []
        self.done = False
        self.last_info = {}
        self.task_id = info["task_id"]
        self.reward = self._shaped_return()
        text = tool_prompt(obs, info["backend"])
        return f"\n\n{text}" if row_text.strip() else text  # TRL joins the two with nothing between

    def _shaped_return(self) -> float:
        """The shaper's return of the submissions so far; a silent episode counts as one ``format_error``."""
        assert self._env is not None
        scores, results = self._scores, self._results
        if not scores:
            from musaenv.rewards import score_from_config

            results = [EvalResult(Stage.FORMAT_ERROR, task_id=self.task_id or "", messages=("no submission",))]
            scores = [score_from_config(results[0], self._env.config.reward)]
        return float(sum(self._env.shaper.episode_rewards(scores, results)))

    def submit_kernel(self, code: str) -> str:
        """Submit a complete Python program for the verifier to build, test against the reference, and time.

        Args:
            code: The full program: imports, the load_inline call with the kernel sources, and class ModelNew.

        Returns:
            The verifier's verdict and feedback, and whether more submissions are allowed.
        """
        if self._env is None or self.done:
            raise ValueError("The episode is over: no more submissions are accepted.")
        _, _, terminated, truncated, info = self._env.step(code)
        self._scores.append(info["score"])
        self._results.append(EvalResult.from_dict(info["eval"]))
        self.reward = self._shaped_return()  # equals the env's episode_return once the episode is over
        self.done = bool(terminated or truncated)
        self.last_info = info
        text = feedback_text(info["eval"], info["score"], self._env.config.feedback_chars)
        if terminated:
            return text + "\nThe kernel is correct. The episode is over."
        if truncated:
            return text + "\nNo submissions left. The episode is over."
        left = self._env.config.max_turns - int(info["turn"])
        return text + f"\nFix the problems and call submit_kernel again ({left} submission(s) left)."

    def get_reward(self) -> float:
        """The episode's shaped return over its submissions (final once the episode is over).

        Returns:
            The shaper's return of this episode's submissions as if it ended now; before any submission, the
            return of one ``format_error`` (the worst verdict).
        """
        return self.reward

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def make_trl_environment(
    *,
    task: str | None = None,
    backend: str = "cpu",
    max_turns: int = 3,
    evaluator: Evaluator | None = None,
    name: str = "KernelGenToolEnv",
    **env_kwargs: Any,
) -> type[KernelGenToolEnv]:
    """A :class:`KernelGenToolEnv` subclass with these settings, for ``GRPOTrainer(environment_factory=...)``.

    Args:
        task: Fixed task id or KernelBench file; ``None`` reads the ``task`` dataset column (or samples the suite).
        backend: Backend of the env and of the shared evaluator.
        max_turns: Submissions per episode.
        evaluator: Evaluator shared by every instance (closed by the caller); default one created on first use
            and closed by :func:`close_trl_environment`.
        name: Name of the returned class.
        **env_kwargs: More :class:`~musaenv.env.KernelGenEnv` arguments (``reward``, ``eval_config``, ...).
    """
    kw = {"task": task, "backend": backend, "max_turns": max_turns, **env_kwargs}
    attrs: dict[str, Any] = {
        "env_kwargs": kw,
        "shared_evaluator": evaluator,
        "_owns_evaluator": evaluator is None,
        "__doc__": KernelGenToolEnv.__doc__,
    }
    return type(name, (KernelGenToolEnv,), attrs)


def close_trl_environment(env_cls: type[KernelGenToolEnv], instances: Sequence[KernelGenToolEnv] = ()) -> None:
    """Close the given instances' envs and the class's shared evaluator when the class created it.

    An evaluator passed to :func:`make_trl_environment` is left open: its owner closes it.
    """
    for inst in instances:
        inst._close()
    ev = env_cls.__dict__.get("shared_evaluator")
    if ev is not None and env_cls._owns_evaluator:
        ev.close()
        env_cls.shared_evaluator = None


def trl_reward_func(environments: Sequence[KernelGenToolEnv], **kwargs: Any) -> list[float]:
    """Each environment's :meth:`~KernelGenToolEnv.get_reward`, as a ``reward_funcs`` entry.

    Only for trainers that do not read ``get_reward`` themselves: TRL 1.16's ``GRPOTrainer`` already adds an
    environment's ``get_reward`` as a reward, so passing this function too counts the reward twice.
    """
    return [env.get_reward() for env in environments]


def trl_dataset_rows(
    task_ids: Sequence[str], repeats: int = 1, instruction: str = DEFAULT_INSTRUCTION
) -> list[dict[str, Any]]:
    """Rows for ``datasets.Dataset.from_list``: a conversational ``prompt`` and the ``task`` column ``reset`` reads."""
    return [{"prompt": [{"role": "user", "content": instruction}], "task": t} for _ in range(repeats) for t in task_ids]
