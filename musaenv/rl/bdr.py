"""Buffered Dynamic Retry (BDR): MusaCoder's reuse of prompts whose whole rollout group failed.

When every rollout of a prompt's group fails, GRPO's group-relative advantages are all zero and the group teaches
nothing. BDR keeps such a prompt, one failed response and the verifier's errors in a bounded FIFO buffer and, with a
small probability per batch slot, re-issues a buffered item as a *feedback-repair* task: "here is the task, here is a
failed attempt, here is what the verifier said; fix it".

The paper leaves open the capacity, the probability, the "all failed" test and the repair prompt; all four are
constructor arguments here, with these defaults:

* capacity 256: a few batches' worth of prompts, so items are re-issued while the policy that failed them is still
  close to the current one; FIFO eviction drops the stalest first.
* probability 0.1: "a small probability" (paper); at most one slot in ten is spent on repairs.
* "all failed" (:func:`all_failed`): every episode has the same return *and* none produced a ``correct`` candidate.
  Equal returns alone would also catch groups that all succeeded equally (no signal either, but nothing to repair).
* the repair prompt: :data:`DEFAULT_REPAIR_TEMPLATE` with ``{prompt}``, ``{response}`` and ``{feedback}``.

The buffered response is the first turn of the group's first episode, i.e. the policy's answer to the original
prompt; the feedback is a summary of that turn's verifier result (:func:`summarize_eval`).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from musaenv.rl.protocol import EpisodeGroup, Prompt

__all__ = [
    "DEFAULT_REPAIR_TEMPLATE",
    "BufferedDynamicRetry",
    "RetryItem",
    "TaskRequest",
    "all_failed",
    "prompt_text",
    "summarize_eval",
]

logger = logging.getLogger(__name__)

DEFAULT_REPAIR_TEMPLATE = (
    "{prompt}\n\n"
    "A previous attempt at this task failed. Here it is:\n\n"
    "{response}\n\n"
    "The verifier reported:\n\n"
    "{feedback}\n\n"
    "Fix the problems and give the complete corrected solution."
)
"""Default repair prompt; ``{prompt}``, ``{response}`` and ``{feedback}`` are filled in."""

_RETURN_TOL = 1e-9  # returns within this are "equal": they give GRPO advantages of exactly 0


def prompt_text(prompt: Prompt) -> str:
    """Render a prompt as text: itself if a string, else the messages' contents joined by blank lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(m.get("content", "")) for m in prompt)


def summarize_eval(eval_dict: Mapping[str, Any], max_chars: int = 2000) -> str:
    """Summarise an ``EvalResult`` dict as verifier feedback: stage, messages, then compiler/runtime logs.

    Args:
        eval_dict: ``EvalResult.to_dict()`` output (missing keys are skipped).
        max_chars: Truncate the summary to this many characters (logs can be long).
    """
    parts = [f"stage: {eval_dict.get('stage', 'unknown')}"]
    parts += [str(m) for m in eval_dict.get("messages") or ()]
    for key in ("compiler_log", "runtime_log"):
        log = eval_dict.get(key)
        if log:
            parts.append(f"{key}:\n{log}")
    text = "\n".join(parts)
    return text if len(text) <= max_chars else text[: max_chars - 15] + "\n...[truncated]"


def all_failed(group: EpisodeGroup) -> bool:
    """Default BDR test: all returns equal (so all advantages are 0) and no episode produced a correct candidate."""
    returns = group.returns
    if not returns:
        return False
    equal = max(returns) - min(returns) <= _RETURN_TOL * max(1.0, max(abs(r) for r in returns))
    return equal and not any(e.solved for e in group.episodes)


@dataclass(frozen=True)
class RetryItem:
    """One buffered failure.

    Attributes:
        task_id: The task that failed.
        prompt: The prompt the policy was given.
        response: A failed response.
        feedback: The verifier's errors for that response, as text.
    """

    task_id: str
    prompt: Prompt
    response: str
    feedback: str


@dataclass(frozen=True)
class TaskRequest:
    """One batch slot: a fresh task, or a repair of a buffered failure.

    Attributes:
        task_id: The task to run (the env evaluates responses against it either way).
        prompt: ``None`` for a fresh task (the policy sees the env's observation); the repair prompt otherwise,
            given to the policy in place of the first observation.
        item: The buffered failure being repaired, ``None`` for a fresh task.
    """

    task_id: str
    prompt: str | None = None
    item: RetryItem | None = None

    @property
    def is_repair(self) -> bool:
        """True for a repair task."""
        return self.prompt is not None


class BufferedDynamicRetry:
    """Bounded FIFO of all-failed groups, re-issued as repair tasks with a small probability.

    Args:
        capacity: Maximum buffered items; adding to a full buffer evicts the oldest.
        probability: Per batch slot, the chance that the slot is given to the oldest buffered item instead.
        template: Repair-prompt template with ``{prompt}``, ``{response}`` and ``{feedback}`` fields.
        failed: The "all failed" test on a group (default :func:`all_failed`).
        feedback: Turns a turn's eval dict into feedback text (default :func:`summarize_eval`).
        buffer_repairs: Whether a failed *repair* group is buffered again (default no: it would nest repair prompts).

    Example:
        >>> bdr = BufferedDynamicRetry(capacity=64, probability=0.1)
        >>> for group in groups:
        ...     bdr.observe_group(group)
        >>> requests = bdr.sample_tasks(next_task_ids, np.random.default_rng(0))
    """

    def __init__(
        self,
        capacity: int = 256,
        probability: float = 0.1,
        template: str = DEFAULT_REPAIR_TEMPLATE,
        failed: Callable[[EpisodeGroup], bool] = all_failed,
        feedback: Callable[[Mapping[str, Any]], str] = summarize_eval,
        buffer_repairs: bool = False,
    ) -> None:
        if not (isinstance(capacity, int) and capacity >= 1):
            raise ValueError(f"BufferedDynamicRetry: expected capacity an int >= 1, found {capacity!r}.")
        if not (math.isfinite(probability) and 0.0 <= probability <= 1.0):
            raise ValueError(f"BufferedDynamicRetry: expected probability in [0, 1], found {probability!r}.")
        for name in ("prompt", "response", "feedback"):
            if "{" + name + "}" not in template:
                raise ValueError(f"BufferedDynamicRetry: the repair template must contain {{{name}}}.")
        self.capacity = capacity
        self.probability = probability
        self.template = template
        self._failed = failed
        self._feedback = feedback
        self._buffer_repairs = buffer_repairs
        self._items: deque[RetryItem] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def items(self) -> tuple[RetryItem, ...]:
        """The buffered items, oldest first."""
        return tuple(self._items)

    def observe_group(self, group: EpisodeGroup) -> bool:
        """Buffer ``group`` if it failed; return whether it was buffered."""
        if group.source == "repair" and not self._buffer_repairs:
            return False
        if not group.episodes or not group.episodes[0].turns or not self._failed(group):
            return False
        turn = group.episodes[0].turns[0]
        item = RetryItem(group.task_id, turn.prompt, turn.response, self._feedback(turn.eval))
        if len(self._items) == self.capacity:
            logger.debug("BDR buffer full (%d): evicting the oldest item (%s)", self.capacity, self._items[0].task_id)
        self._items.append(item)
        return True

    def repair_prompt(self, item: RetryItem) -> str:
        """Fill the template for ``item``."""
        return self.template.format(prompt=prompt_text(item.prompt), response=item.response, feedback=item.feedback)

    def sample_tasks(self, batch_task_ids: Sequence[str], rng: np.random.Generator) -> list[TaskRequest]:
        """Turn a batch of task ids into requests, handing some slots to buffered repairs.

        For each slot in order one uniform number is drawn (always, so the stream does not depend on the buffer);
        when it is below ``probability`` and the buffer is not empty, the slot goes to the oldest buffered item,
        which leaves the buffer. Other slots are fresh tasks.

        Args:
            batch_task_ids: The task ids the batch would run without BDR.
            rng: A seeded ``numpy.random.Generator``.

        Returns:
            One :class:`TaskRequest` per slot, in order.
        """
        draws = rng.random(len(batch_task_ids))
        out: list[TaskRequest] = []
        for task_id, u in zip(batch_task_ids, draws):
            if u < self.probability and self._items:
                item = self._items.popleft()
                out.append(TaskRequest(item.task_id, self.repair_prompt(item), item))
            else:
                out.append(TaskRequest(str(task_id)))
        return out
