"""KernelGen-v0 as a verifiers 0.4 (``verifiers.v1``) taskset with multi-turn feedback (extra ``verifiers``).

verifiers loads a taskset by id from an installed top-level package that exports the plugin classes via
``__all__``: musaenv ships ``musaenv_kernelgen`` (taskset id ``musaenv-kernelgen``), which re-exports this
module's :class:`KernelGenTaskset` and :class:`KernelGenVerifiersEnv`::

    vf-eval musaenv-kernelgen -m MODEL --client.base-url URL --no-push \\
        --env.taskset.tasks '["l1_relu"]' --env.taskset.max-turns 3

The pieces, as verifiers 0.4 defines them (read from ``verifiers/v1/env.py``, ``agent.py``, ``task.py``):

* :class:`KernelGenTaskset` yields one :class:`KernelGenTask` per task id: ``prompt`` is the env's first
  observation (the same text as ``musaenv dataset``), ``task``/``level``/``backend`` ride on the task data.
* :class:`KernelGenVerifiersEnv` is the taskset's own ``Env`` (verifiers picks it with the taskset): its
  ``run`` holds the agent's ``interaction`` open, submits each reply to a :class:`~musaenv.env.KernelGenEnv`
  host-side and sends the verifier's feedback (``info["feedback"]``) back as the next user message, until the
  env ends the episode (a ``correct`` verdict or ``max_turns`` submissions) or the agent's run stops.
* The reward is the task's one ``@vf.reward`` (``kernelgen_return``): the env's shaped return (PrimeEcho by
  default), counted once. An episode whose agent never replied scores like one ``format_error`` submission
  (the worst verdict), so silence never pays more than a failed attempt. A turn the verifier could not judge
  (``infra_error``) fails the episode (verifiers records the error; ``--resume`` re-runs it) instead of
  scoring it.
* The default seat (``agent``) plays verifiers' tool-less chat harness (``null``) in the local ``subprocess``
  runtime: the verifier runs host-side, so the agent needs no sandbox. The harness program is a PEP 723 script
  that verifiers prepares with ``uv`` (``uv`` must be on ``PATH``; it fetches the script's dependencies once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.harnesses.null import NullHarnessConfig

from musaenv.config import EvalConfig
from musaenv.env import Evaluator, KernelGenEnv
from musaenv.types import EvalResult, Stage

__all__ = [
    "TASKSET_ID",
    "KernelGenData",
    "KernelGenEnvConfig",
    "KernelGenTask",
    "KernelGenTaskset",
    "KernelGenTasksetConfig",
    "KernelGenVerifiersEnv",
]

log = logging.getLogger(__name__)

TASKSET_ID = "musaenv-kernelgen"
"""The id verifiers loads the taskset by (the ``musaenv_kernelgen`` package)."""
INFO_KEY = "musaenv"
"""Key of the episode record on ``trace.info``."""


class KernelGenTasksetConfig(vf.TasksetConfig):
    """The taskset's knobs (``--env.taskset.*``)."""

    tasks: list[str] | None = None
    """Task ids or KernelBench files; ``None``: the built-in suite (``level`` filters it)."""
    level: int | None = None
    """Only built-in tasks of this level (ignored when ``tasks`` is given)."""
    backend: str = "cpu"
    """Backend the prompts are written for and the verifier runs on (``cpu``, ``cuda``, ``triton``, ``musa``)."""
    max_turns: int = 3
    """Submissions per episode."""
    reward: str | None = None
    """Reward shaper (``prime_echo``, ...); ``None``: the env's default (PrimeEcho)."""
    seed: int | None = 0
    """Seed of each episode's ``reset`` (input generation); ``None``: fresh randomness."""
    system: str | None = None
    """Optional system prompt of every task."""
    eval_config: dict[str, Any] | None = None
    """:class:`~musaenv.config.EvalConfig` fields (JSON), e.g. ``{"timing": {"repeats": 5}}``."""


class KernelGenData(vf.TaskData):
    """One KernelGen-v0 task: the prompt plus what the env's ``reset`` needs."""

    task: str
    level: int
    backend: str


class KernelGenTask(vf.Task[KernelGenData, vf.State, vf.TaskConfig]):
    """Scores a finished episode from the record :class:`KernelGenVerifiersEnv` left on the trace."""

    @property
    def key(self) -> str:
        """The task id: stable across runs (the default content hash includes the position)."""
        return f"{self.data.backend}:{self.data.task}"

    @vf.reward
    async def kernelgen_return(self, trace: vf.Trace) -> float:
        """The env's shaped episode return (PrimeEcho by default); the only reward, so counted once."""
        return float(_record(trace)["episode_return"])

    @vf.metric
    async def solved(self, trace: vf.Trace) -> float:
        """1 when some turn's verdict was ``correct``."""
        return float("correct" in _record(trace)["verdicts"])

    @vf.metric
    async def submissions(self, trace: vf.Trace) -> float:
        """Replies the verifier judged."""
        return float(len(_record(trace)["verdicts"]))


def _record(trace: vf.Trace) -> dict[str, Any]:
    record = trace.info.get(INFO_KEY)
    if record is None:
        raise ValueError(f"no {INFO_KEY!r} record on the trace: run the taskset with its own env ({TASKSET_ID})")
    return dict(record)


class KernelGenTaskset(vf.Taskset[KernelGenTask, KernelGenTasksetConfig]):
    """The KernelGen-v0 tasks as verifiers tasks (one per task id)."""

    def load(self) -> Iterator[KernelGenTask]:
        """Yield one task per selected task id, its prompt the env's first observation."""
        from musaenv.rl.dataset import dataset_rows

        cfg = self.config
        for row in dataset_rows(cfg.tasks, level=cfg.level, backend=cfg.backend):
            data = KernelGenData(id=row["task"], name=row["task"], prompt=row["prompt"][-1]["content"],
                                 system_prompt=cfg.system, task=row["task"], level=row["level"],
                                 backend=row["backend"])  # fmt: skip
            yield KernelGenTask(data, cfg.task)


class KernelGenEnvConfig(vf.EnvConfig):
    """The env's config: one ``agent`` seat (``--env.agent.*``), by default the chat harness run locally."""

    agent: vf.AgentConfig = vf.AgentConfig(harness=NullHarnessConfig(id="null"), runtime=vf.SubprocessConfig())
    """The policy's seat: verifiers' tool-less chat loop (``null``) in the ``subprocess`` runtime."""


class KernelGenVerifiersEnv(vf.Env[KernelGenEnvConfig]):
    """Plays each task as a KernelGen-v0 episode: reply, verdict and feedback, next reply, until the episode ends.

    All episodes of one env share one :class:`~musaenv.evaluator.pool.EvaluatorPool` (build and timing caches,
    worker processes), opened by ``start`` and closed by ``stop``.
    """

    def __init__(self, config: KernelGenEnvConfig) -> None:
        super().__init__(config)
        self._evaluator: Evaluator | None = None

    @property
    def _taskset_config(self) -> KernelGenTasksetConfig:
        cfg = self.taskset.config
        assert isinstance(cfg, KernelGenTasksetConfig)
        return cfg

    def _eval_config(self) -> EvalConfig | None:
        raw = self._taskset_config.eval_config
        return None if raw is None else EvalConfig.from_dict(raw)

    async def start(self) -> None:
        """Open the shared evaluator."""
        if self._evaluator is None:
            from musaenv.evaluator.pool import EvaluatorPool

            self._evaluator = EvaluatorPool(self._taskset_config.backend, self._eval_config())

    async def stop(self) -> None:
        """Close the shared evaluator (tolerates a ``start`` that never ran)."""
        evaluator, self._evaluator = self._evaluator, None
        if evaluator is not None:
            await asyncio.to_thread(evaluator.close)

    def _make_env(self, task: KernelGenTask) -> KernelGenEnv:
        cfg = self._taskset_config
        assert self._evaluator is not None
        return KernelGenEnv(task=task.data.task, backend=task.data.backend, max_turns=cfg.max_turns,
                            reward=cfg.reward, eval_config=self._eval_config(), evaluator=self._evaluator,
                            observation="message")  # fmt: skip

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        """One episode: the task prompt opens it, each reply is judged, feedback goes back as the user's turn."""
        assert isinstance(task, KernelGenTask)
        await self.start()  # no-op under verifiers' serving(); covers a bare run_episode
        env = self._make_env(task)
        try:
            _, info = env.reset(seed=self._taskset_config.seed)
            async with agents.agent.interaction(task) as interaction:
                episode = _Episode(env, str(info["task_id"]))
                try:
                    await _play(interaction, episode)
                finally:  # the scoring hooks read it, also after a failed turn
                    interaction.trace.info[INFO_KEY] = episode.record()
                episode.raise_on_infra_error()
        finally:
            env.close()


async def _play(interaction: vf.Interaction, episode: _Episode) -> None:
    """The exchange: the model's reply, the verifier's feedback as the next user turn, until either side ends it."""
    segment = await interaction.turn()  # a prompted task: the model speaks first
    while not segment.terminated:
        feedback = await episode.submit(segment.last_reply)
        if feedback is None:
            return
        segment = await interaction.turn(feedback)


class _Episode:
    """The submissions of one episode and its shaped return."""

    def __init__(self, env: KernelGenEnv, task_id: str) -> None:
        self.env = env
        self.task_id = task_id
        self.scores: list[float | None] = []
        self.results: list[EvalResult] = []
        self.feedback: list[str] = []
        self.done = False

    async def submit(self, reply: str) -> str | None:
        """Judge one reply (off the event loop); the next user message, or ``None`` once the episode is over."""
        _, _, terminated, truncated, info = await asyncio.to_thread(self.env.step, reply)
        self.scores.append(info["score"])
        self.results.append(EvalResult.from_dict(info["eval"]))
        self.feedback.append(info["feedback"])
        self.done = bool(terminated or truncated)
        return None if self.done else str(info["feedback"])

    def episode_return(self) -> float:
        """The shaper's return of the submissions so far; no submission counts as one ``format_error``."""
        scores, results = self.scores, self.results
        if not scores:
            from musaenv.rewards import score_from_config

            results = [EvalResult(Stage.FORMAT_ERROR, task_id=self.task_id, messages=("no reply",))]
            scores = [score_from_config(results[0], self.env.config.reward)]
        return float(sum(self.env.shaper.episode_rewards(scores, results)))

    def record(self) -> dict[str, Any]:
        """The JSON record the task's reward and metrics read (kept on ``trace.info``, so in ``traces.jsonl``)."""
        return {"task_id": self.task_id, "verdicts": [r.stage.value for r in self.results],
                "scores": self.scores, "feedback": self.feedback, "done": self.done,
                "episode_return": self.episode_return()}  # fmt: skip

    def raise_on_infra_error(self) -> None:
        """An unjudged turn is the harness's failure, never the candidate's score: fail the episode."""
        bad = [r for r in self.results if r.stage == Stage.INFRA_ERROR]
        if bad:
            raise RuntimeError(f"musaenv infra_error on {self.task_id}: {'; '.join(bad[0].messages)[:500]}")
