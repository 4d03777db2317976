"""PPO (Stable-Baselines3) picks kernels: KernelGen-v0 behind the discrete-action wrapper.

Each action submits one program of the task's candidate pool (fast, slow, wrong, crash, cheat, prose); the real
verifier judges it and the reward is KernelGen-v0's shaped reward. An evaluation cache runs the verifier once per
(task, program) and replays the verdict afterwards, so thousands of training steps take minutes. After training,
the script prints the policy's probability of each program: the fast correct kernel should win.

    pip install stable-baselines3
    python examples/sb3_ppo.py --timesteps 4096 --tasks l1_relu l1_add
    python examples/sb3_ppo.py --smoke
"""

from __future__ import annotations

import argparse
import time

import torch
from stable_baselines3 import PPO

from musaenv.rl.adapters import DiscreteKernelEnv


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["l1_relu", "l1_add"], help="built-in tasks with CPU solutions")
    p.add_argument("--timesteps", type=int, default=4096, help="PPO environment steps")
    p.add_argument("--eval-cache", default=None, help="JSON file that keeps verifier results across runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="tiny budget: l1_relu, 512 steps")
    args = p.parse_args()
    if args.smoke:
        args.tasks, args.timesteps = ["l1_relu"], 512
    return args


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)  # tiny networks: one thread beats two contended ones
    env = DiscreteKernelEnv(tasks=args.tasks, backend="cpu", max_turns=3, eval_cache_path=args.eval_cache)
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=4, learning_rate=3e-3, seed=args.seed)
    start = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    assert env.cache is not None
    print(
        f"trained {args.timesteps} steps in {time.perf_counter() - start:.0f} s; "
        f"verifier runs {env.cache.misses}, cache hits {env.cache.hits}"
    )
    for task in args.tasks:
        obs, _ = env.reset(seed=args.seed, options={"task": task})
        with torch.no_grad():
            dist = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0])
            probs = dist.log_prob(torch.arange(len(env.pool.names))).exp().tolist()
        print(f"{task}: first-turn policy and the (cached) verdict of each program")
        for action in sorted(range(len(probs)), key=lambda a: -probs[a]):
            env.reset(seed=args.seed, options={"task": task})
            _, _, _, _, info = env.step(action)
            verdict = f"{info['eval']['stage']} (score {info['score']:.3f})"
            print(f"  p={probs[action]:.2f}  {env.pool.names[action]:6s} {verdict}")
    env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
