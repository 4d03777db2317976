"""A custom policy-optimizer plugin in a few lines: REINFORCE over a pool of candidate programs.

``PoolReinforce`` implements both plugin protocols of ``musaenv.rl``: ``generate`` (a Policy: sample an arm per
prompt, reporting it as a one-token ``Generation`` with its log-probability) and ``update`` (an Optimizer: a
policy-gradient step on the group advantages, honouring each turn's loss weight). ``collect_groups`` runs the real
KernelGen-v0 episodes; an evaluation cache runs the verifier once per program and replays it afterwards.

    python examples/custom_optimizer.py --steps 20
    python examples/custom_optimizer.py --smoke
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from musaenv.evaluator.local import LocalEvaluator
from musaenv.rl import EpisodeBatch, Generation, Optimizer, Policy, Prompt, collect_groups
from musaenv.rl.adapters import PROGRAMS, CachingEvaluator, program_response


class PoolReinforce:
    """Softmax over a task's candidate programs, trained by REINFORCE on group advantages."""

    def __init__(self, task: str, lr: float = 0.5, seed: int = 0) -> None:
        self.arms = [program_response(task, p) for p in PROGRAMS]
        self.logits = np.zeros(len(self.arms))
        self.lr = lr
        self.rng = np.random.default_rng(seed)

    def probs(self) -> np.ndarray:
        z = np.exp(self.logits - self.logits.max())
        return z / z.sum()

    def generate(self, prompts: Sequence[Prompt], *, num_samples: int = 1, **kw: Any) -> list[list[Generation]]:
        p = self.probs()
        draws = [self.rng.choice(len(self.arms), size=num_samples, p=p) for _ in prompts]
        return [[Generation(self.arms[a], (int(a),), (float(np.log(p[a])),)) for a in row] for row in draws]

    def update(self, batch: EpisodeBatch) -> dict[str, float]:
        grad, weight = np.zeros_like(self.logits), 0.0
        for episode, advantage in batch.episodes():
            for turn in episode.turns:
                if turn.loss_weight > 0 and turn.token_ids:  # PrimeEcho trains the first turn only
                    onehot = np.eye(len(self.arms))[turn.token_ids[0]]
                    grad += turn.loss_weight * advantage * (onehot - self.probs())  # d log softmax / d logits
                    weight += turn.loss_weight
        if weight:
            self.logits += self.lr * grad / weight
        return {"n_sequences": weight, "mean_return": batch.mean_return, "p_fast": float(self.probs()[0])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="l1_relu", help="a built-in task with a CPU solution")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps")
    p.add_argument("--group-size", type=int, default=8, help="episodes per step")
    p.add_argument("--smoke", action="store_true", help="tiny budget: 3 steps of 4 episodes")
    args = p.parse_args()
    if args.smoke:
        args.steps, args.group_size = 3, 4
    agent = PoolReinforce(args.task)
    assert isinstance(agent, Policy) and isinstance(agent, Optimizer)
    evaluator = CachingEvaluator(LocalEvaluator("cpu"), seeds=1)
    env = gym.make("KernelGen-v0", backend="cpu", max_turns=2, evaluator=evaluator)
    for step in range(args.steps):
        groups = collect_groups(env, agent, [args.task], group_size=args.group_size, seed=step)
        metrics = agent.update(EpisodeBatch(tuple(groups)))
        print(f"step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
    print("final policy: " + ", ".join(f"{n} {q:.2f}" for n, q in zip(PROGRAMS, agent.probs())))
    env.close()
    evaluator.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
