"""A scripted agent that repairs its answer from the verifier's feedback, and what the reward makes of that.

Two strategies on the same task, each one episode of KernelGen-v0 with the real verifier:

* "repair": submit a draft that crashes, read the verdict in the next observation, then submit the working kernel;
* "direct": submit the working kernel at once.

Both end with a correct kernel, but PrimeEcho (the default shaper) anchors the reward on the first turn, so
"direct" earns more: failing on purpose at turn 1 and fixing it at turn 2 is not a way to farm reward.

    python examples/scripted_agent.py --task l1_add
    python examples/scripted_agent.py --smoke
"""

from __future__ import annotations

import argparse

import gymnasium as gym

import musaenv  # noqa: F401 - registers KernelGen-v0
from musaenv.rl.adapters.pool import program_response


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="l1_relu", help="a built-in task with a CPU solution")
    p.add_argument("--reward", default="primeecho", help="reward shaper (primeecho, best, last, per_turn, delta)")
    p.add_argument("--smoke", action="store_true", help="tiny budget (this script is already small)")
    return p.parse_args()


def run(env: gym.Env, task: str, script: list[str]) -> float:
    """Play ``script`` (program names) until the episode ends; return the episode return."""
    obs, _ = env.reset(seed=0, options={"task": task})
    for program in script:
        obs, _, terminated, truncated, info = env.step(program_response(task, program))
        print(f"  turn {info['turn']}: {program} -> {info['eval']['stage']} (score {info['score']})")
        if terminated or truncated:
            return float(info["episode_return"])
        # The next observation carries the verifier's feedback; a real policy would read it here.
        assert "Verifier feedback on attempt" in obs
    raise RuntimeError("the script ended before the episode did")


def main() -> int:
    args = parse_args()
    env = gym.make("KernelGen-v0", backend="cpu", max_turns=3, reward=args.reward)
    print(f"repair on {args.task}:")
    repaired = run(env, args.task, ["crash", "fast"])
    print(f"direct on {args.task}:")
    direct = run(env, args.task, ["fast"])
    env.close()
    print(f"{args.reward} return with repair: {repaired:.3f}")
    print(f"{args.reward} return direct: {direct:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
