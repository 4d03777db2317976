"""GRPO on KernelGen-v0 with the reference trainer and a tiny local language model, on the CPU.

The loop is the one a real run uses: Buffered Dynamic Retry picks the batch's prompts (some become repair prompts),
``collect_groups`` samples G episodes per prompt with the policy and scores them with the real verifier, and
``GRPOTrainer.update`` takes a clipped GRPO step with the MirrorPop filter. With the default tiny model (randomly
initialised, about 0.1 M parameters, nothing downloaded) every response is gibberish, judged ``format_error`` in
milliseconds: all returns of a group are equal, the advantages are zero, the update has nothing to learn from
(``n_sequences`` 0) and BDR buffers the group. Pass ``--model`` (a local Hugging Face checkpoint directory) on a
machine with a GPU to train a real model with the same loop.

    python examples/grpo_tiny.py --steps 5
    python examples/grpo_tiny.py --model /path/to/Qwen2.5-Coder-0.5B-Instruct --max-new-tokens 1024
    python examples/grpo_tiny.py --smoke
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

import musaenv  # noqa: F401 - registers KernelGen-v0
from musaenv.rl import BufferedDynamicRetry, EpisodeBatch, GRPOConfig, GRPOTrainer, build_tiny_lm, collect_groups


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["l1_relu", "l1_add"], help="task ids, one group each per step")
    p.add_argument("--steps", type=int, default=5, help="GRPO steps")
    p.add_argument("--group-size", type=int, default=4, help="episodes per prompt (GRPO's G)")
    p.add_argument("--max-turns", type=int, default=2, help="responses per episode")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per response")
    p.add_argument("--model", default=None, help="local Hugging Face checkpoint (default: the tiny random model)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="tiny budget: 2 steps, one task, G=2, 1 turn, 32 tokens")
    args = p.parse_args()
    if args.smoke:
        args.tasks, args.steps, args.group_size, args.max_turns, args.max_new_tokens = ["l1_relu"], 2, 2, 1, 32
    return args


def load_policy(args: argparse.Namespace) -> GRPOTrainer:
    if args.model is None:
        model, tokenizer = build_tiny_lm(seed=args.seed)
        max_prompt = 512 - args.max_new_tokens  # the tiny model has 512 positions; keep the prompt's end
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype="auto")
        model.to("cuda" if torch.cuda.is_available() else "cpu")  # type: ignore[arg-type]  # transformers' stub
        max_prompt = None
    config = GRPOConfig(
        learning_rate=1e-5, max_new_tokens=args.max_new_tokens, max_prompt_tokens=max_prompt, seed=args.seed
    )
    return GRPOTrainer(model, tokenizer, config)


def main() -> int:
    args = parse_args()
    torch.manual_seed(args.seed)
    trainer = load_policy(args)
    env = gym.make("KernelGen-v0", backend="cpu", max_turns=args.max_turns)
    bdr = BufferedDynamicRetry(capacity=64, probability=0.25)
    rng = np.random.default_rng(args.seed)
    for step in range(args.steps):
        start = time.perf_counter()
        requests = bdr.sample_tasks(args.tasks, rng)
        groups = collect_groups(env, trainer, requests, group_size=args.group_size, seed=args.seed + step)
        buffered = sum(bdr.observe_group(g) for g in groups)
        metrics = trainer.update(EpisodeBatch(tuple(groups)))
        stages = sorted({t.stage or "?" for g in groups for e in g.episodes for t in e.turns})
        print(
            f"step {step}: mean return {metrics['mean_return']:.3f}, trained sequences "
            f"{metrics['n_sequences']:.0f}, repairs {sum(r.is_repair for r in requests)}, newly buffered {buffered}, "
            f"verdicts {stages}, {time.perf_counter() - start:.1f} s"
        )
    env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
