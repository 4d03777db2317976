"""A random agent on KernelGen-v0: every turn submits a program drawn at random from the task's candidate pool.

The pool (``musaenv.rl.adapters.pool``) holds variants of the shipped solution: fast and slow correct kernels, a
wrong one, a crashing one, a cheating one and prose. Each turn is judged by the real verifier (the first use of a
task compiles its C++ once; later uses hit the build cache), so the printout shows what every verdict looks like
and what the default reward (PrimeEcho) pays for each episode.

    python examples/random_agent.py --episodes 5
    python examples/random_agent.py --smoke      # one short episode on l1_relu
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import musaenv  # noqa: F401 - registers KernelGen-v0
from musaenv.rl.adapters.pool import PROGRAMS, program_response


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["l1_relu", "l1_add"], help="built-in tasks with CPU solutions")
    p.add_argument("--episodes", type=int, default=4, help="episodes to run")
    p.add_argument("--max-turns", type=int, default=3, help="responses per episode")
    p.add_argument("--seed", type=int, default=0, help="seeds the agent and the env")
    p.add_argument("--smoke", action="store_true", help="tiny budget: one 2-turn episode on l1_relu")
    args = p.parse_args()
    if args.smoke:
        args.tasks, args.episodes, args.max_turns = ["l1_relu"], 1, 2
    return args


def main() -> int:
    args = parse_args()
    rng = np.random.default_rng(args.seed)
    env = gym.make("KernelGen-v0", backend="cpu", max_turns=args.max_turns)
    returns = []
    for episode in range(args.episodes):
        task = str(rng.choice(args.tasks))
        env.reset(seed=args.seed + episode, options={"task": task})
        done = False
        while not done:
            program = str(rng.choice(PROGRAMS))
            _, _, terminated, truncated, info = env.step(program_response(task, program))
            done = terminated or truncated
            print(f"episode {episode} {task} turn {info['turn']}: {program:6s} -> {info['eval']['stage']}")
        returns.append(info["episode_return"])
        print(f"episode {episode} return {info['episode_return']:.3f} (per-turn scores {info['scores']})")
    env.close()
    print(f"mean return over {len(returns)} episode(s): {np.mean(returns):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
