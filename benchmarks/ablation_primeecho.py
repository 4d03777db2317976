"""Does PrimeEcho keep first-turn success higher than best-of-turns? A tabular policy learns from KernelGen-v0.

The claim (MusaCoder, arXiv 2606.04847, eq. 9 and its ablation): under a pure best-of-turns reward a policy may fail
at turn 1 and "fix" it later; PrimeEcho's anchor on s_1 keeps first-turn success higher.

Set-up, read top to bottom:

1. A fixed pool of 8 programs per task (``candidate_pool.py``: fast, slow, partial, wrong, crash, broken, cheat,
   prose). Each (task, program) is evaluated by the REAL ``LocalEvaluator`` once per evaluation seed and the
   ``EvalResult``s are cached in ``<out>/evals.json`` (the one-off cost: a few compiles; reruns reuse the file).
2. A tabular softmax policy picks a program given (task, verdict of the previous turn; "start" at turn 1). With
   ``--policy shared`` (default) the logits are a per-task preference shared by all turns plus a per-verdict
   correction, like one LLM answering every turn; ``independent`` has one table per verdict.
3. Episodes run through the real ``KernelGenEnv`` (stop on success, at most 3 turns, feedback, shaping) with a
   :class:`CachedEvaluator` that replays the recorded verdicts. G episodes per task form a GRPO group. Each turn's
   credit is the return-to-go of the shaper's per-turn rewards (``kevin``/``tcpo`` rewards already include the
   future and are used as they are; ``tcpo`` is shaped per group); advantages are turn-level leave-one-out
   (TRLOO) differences divided by the group's std at that turn; the loss weights of the shaper decide which turns
   are trained (PrimeEcho and best: turn 1 only).
4. After every update the metrics are computed exactly from the policy and the recorded verdict frequencies:
   success within the turn limit, first-turn success, expected turns to success, expected first-turn score.

Usage (from the repository root)::

    PYTHONPATH=. python benchmarks/ablation_primeecho.py [--seeds 5] [--iterations 150] [--out out/ablation]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from candidate_pool import PROGRAMS, CachedEvaluator, collect_outcomes, program_response, response_key

from musaenv.env import KernelGenEnv
from musaenv.rewards import candidate_score, make_shaper, trloo_advantages
from musaenv.types import Stage

log = logging.getLogger("ablation_primeecho")

STATES = ("start", *(s.value for s in Stage))
METRICS = ("success", "first_turn_success", "turns_to_success", "first_turn_score")


@dataclass
class Args:
    """Command-line arguments."""

    tasks: tuple[str, ...] = ("l1_relu", "l1_softmax", "l1_gelu")
    """Built-in tasks with a shipped CPU solution."""
    shapers: tuple[str, ...] = ("primeecho", "best", "last", "per_turn", "tcpo")
    """Reward shapers compared, each trained from the same seeds."""
    seeds: int = 5
    """Training seeds 0..seeds-1 (policy sampling and env resets)."""
    iterations: int = 150
    """Policy updates per run (one update = one group per task)."""
    group_size: int = 8
    """Episodes per task per update (MusaCoder samples 8 per prompt)."""
    lr: float = 0.3
    """Step size on the logits."""
    max_turns: int = 3
    """Turns per episode (MusaCoder: at most 3)."""
    eval_seeds: int = 2
    """Real evaluations per (task, program), replayed by seed."""
    policy: str = "shared"
    """Logit parameterisation: shared (task preference + verdict correction) or independent (one table per verdict)."""
    out: str = "out/ablation"
    """Output directory (evals.json, results.json, results.md, learning_curves.png)."""
    docs_img: str = ""
    """If set, copy the learning-curve PNG there (e.g. docs/img/ablation_primeecho.png)."""


@dataclass
class OutcomeModel:
    """Verdict frequencies and mean score of each (task, program), from the recorded evaluations."""

    stage_probs: np.ndarray  # [task, program, state]
    mean_score: np.ndarray  # [task, program]
    table: list[dict[str, Any]] = field(default_factory=list)


def build_outcome_model(tasks: tuple[str, ...], outcomes: dict[str, list[dict[str, Any]]], key_of: Any) -> OutcomeModel:
    """Summarise the cached verdicts of every (task, program)."""
    probs = np.zeros((len(tasks), len(PROGRAMS), len(STATES)))
    mean_score = np.zeros((len(tasks), len(PROGRAMS)))
    table = []
    for t, task in enumerate(tasks):
        for p, program in enumerate(PROGRAMS):
            runs = outcomes[key_of(task, program)]
            scores = [candidate_score(r) for r in runs]
            for r in runs:
                probs[t, p, STATES.index(r["stage"])] += 1 / len(runs)
            mean_score[t, p] = float(np.mean([-1.0 if s is None else s for s in scores]))
            speedups = [r["speedup"] for r in runs if r.get("speedup") is not None]
            table.append(
                {
                    "task": task,
                    "program": program,
                    "stages": [r["stage"] for r in runs],
                    "scores": [None if s is None else round(s, 3) for s in scores],
                    "speedup": round(float(np.mean(speedups)), 3) if speedups else None,
                    "eval_time_s": round(sum(r.get("eval_time_s") or 0.0 for r in runs), 1),
                }
            )
    return OutcomeModel(probs, mean_score, table)


class TabularPolicy:
    """Softmax over programs given (task, previous verdict)."""

    def __init__(self, n_tasks: int, shared: bool) -> None:
        self.shared = shared
        self.theta = np.zeros((n_tasks, len(PROGRAMS)))  # per-task preference, used at every turn
        self.phi = np.zeros((n_tasks, len(STATES), len(PROGRAMS)))  # per-verdict correction

    def probs(self, t: int, s: int) -> np.ndarray:
        """pi(. | task t, state s)."""
        z = self.phi[t, s] + (self.theta[t] if self.shared else 0.0)
        e = np.exp(z - z.max())
        return e / e.sum()

    def apply(self, steps: list[tuple[int, int, int, float]]) -> None:
        """Ascend sum(step * grad log pi(a | t, s)) over (t, s, a, step), every gradient taken at the current policy."""
        grads = [(t, s, step, self.probs(t, s), a) for t, s, a, step in steps]
        for t, s, step, p, a in grads:
            g = -p
            g[a] += 1.0
            self.phi[t, s] += step * g
            if self.shared:
                self.theta[t] += step * g


def exact_metrics(policy: TabularPolicy, model: OutcomeModel, t: int, max_turns: int) -> dict[str, float]:
    """Success within ``max_turns``, first-turn success, E[turns | success], E[s_1], from the verdict model."""
    correct = STATES.index(Stage.CORRECT.value)
    # dist over states at the start of each turn (episodes still running)
    dist = np.zeros(len(STATES))
    dist[0] = 1.0
    success, turns_weighted = 0.0, 0.0
    first_success = 0.0
    for k in range(1, max_turns + 1):
        nxt = np.zeros(len(STATES))
        for s in (int(i) for i in np.nonzero(dist)[0]):
            pi = policy.probs(t, s)
            stage_dist = pi @ model.stage_probs[t]  # over next verdicts
            p_win = dist[s] * stage_dist[correct]
            success += p_win
            turns_weighted += k * p_win
            if k == 1:
                first_success = p_win
            stage_dist[correct] = 0.0
            nxt += dist[s] * stage_dist
        dist = nxt
    first_score = float(policy.probs(t, 0) @ model.mean_score[t])
    return {
        "success": success,
        "first_turn_success": first_success,
        "turns_to_success": turns_weighted / success if success > 0 else float(max_turns),
        "first_turn_score": first_score,
    }


def turn_credits(shaper_name: str, rewards: list[float]) -> list[float]:
    """Credit of each turn: return-to-go, except for shapers whose per-turn rewards already include the future."""
    if shaper_name in ("kevin", "tcpo"):
        return list(rewards)
    return [math.fsum(rewards[k:]) for k in range(len(rewards))]


def group_advantages(credits: list[list[float]]) -> list[list[float]]:
    """TRLOO difference per turn, divided by the std (ddof 1) of that turn's credits over the group; 0 if < 2."""
    loo = trloo_advantages(credits)
    out = []
    for episode in loo:
        row = []
        for k, a in enumerate(episode):
            peers = [c[k] for c in credits if len(c) > k]
            std = float(np.std(peers, ddof=1)) if len(peers) >= 2 else 0.0
            row.append(a / (std + 1e-6) if std > 0 else 0.0)
        out.append(row)
    return out


def run_episode(
    env: KernelGenEnv, policy: TabularPolicy, t: int, task_id: str, responses: list[str], rng: np.random.Generator
) -> tuple[list[tuple[int, int]], dict[str, Any], list[dict[str, Any]]]:
    """One episode through the real env: [(state, program)] per turn, the last info, the verdict dicts."""
    env.reset(options={"task": task_id})
    state, turns, evals = 0, [], []
    while True:
        a = int(rng.choice(len(PROGRAMS), p=policy.probs(t, state)))
        _, _, terminated, truncated, info = env.step(responses[a])
        turns.append((state, a))
        evals.append(info["eval"])
        state = STATES.index(info["eval"]["stage"])
        if terminated or truncated:
            return turns, info, evals


def train(
    shaper_name: str, seed: int, args: Args, responses: list[list[str]], evaluator: CachedEvaluator, model: OutcomeModel
) -> dict[str, list[float]]:
    """One training run; returns each metric (mean over tasks) before the first and after every update."""
    from musaenv.types import EvalResult

    rng = np.random.default_rng(np.random.SeedSequence([seed]))
    policy = TabularPolicy(len(args.tasks), shared=args.policy == "shared")
    env = KernelGenEnv(backend="cpu", max_turns=args.max_turns, reward=shaper_name, evaluator=evaluator)
    env.reset(seed=seed, options={"task": args.tasks[0]})
    shaper = make_shaper(shaper_name)
    curves: dict[str, list[float]] = {m: [] for m in METRICS}

    def record() -> None:
        per_task = [exact_metrics(policy, model, t, args.max_turns) for t in range(len(args.tasks))]
        for m in METRICS:
            curves[m].append(float(np.mean([d[m] for d in per_task])))

    record()
    for _ in range(args.iterations):
        steps: list[tuple[int, int, int, float]] = []
        for t, task_id in enumerate(args.tasks):
            group = [run_episode(env, policy, t, task_id, responses[t], rng) for _ in range(args.group_size)]
            if shaper.needs_group:  # the env shapes each episode alone; TCPO's hindsight needs the group
                rewards = shaper.group_rewards(
                    [info["scores"] for _, info, _ in group],
                    [[EvalResult.from_dict(e) for e in evals] for _, _, evals in group],
                )
            else:
                rewards = [info["turn_rewards"] for _, info, _ in group]
            advs = group_advantages([turn_credits(shaper_name, r) for r in rewards])
            for (turns, info, _), adv in zip(group, advs, strict=True):
                for k, (s, a) in enumerate(turns):
                    w = info["loss_weights"][k]
                    if w > 0 and adv[k] != 0.0:
                        steps.append((t, s, a, args.lr * w * adv[k] / args.group_size))
        policy.apply(steps)
        record()
    env.close()
    return curves


def summarize(curves: dict[str, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Per shaper: final value (mean, std over seeds) and mean over the run (area under the curve) per metric."""
    rows = []
    for shaper, by_metric in curves.items():
        row: dict[str, Any] = {"shaper": shaper}
        for m, arr in by_metric.items():
            row[f"{m}_final_mean"] = float(arr[:, -1].mean())
            row[f"{m}_final_std"] = float(arr[:, -1].std())
            row[f"{m}_auc"] = float(arr.mean())
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]], args: Args) -> str:
    """Final metrics (mean +- std over seeds) and run averages, as a Markdown table."""
    head = [
        "shaper",
        "success (final)",
        "turn-1 success (final)",
        "turn-1 success (run mean)",
        "turns to success (final)",
        "E[s_1] (final)",
    ]
    lines = [
        f"{args.seeds} seeds x {args.iterations} updates x {len(args.tasks)} tasks x G={args.group_size}, "
        f"policy={args.policy}, lr={args.lr}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [r["shaper"]]
        for m in ("success", "first_turn_success"):
            cells.append(f"{r[f'{m}_final_mean']:.3f} +- {r[f'{m}_final_std']:.3f}")
        cells.append(f"{r['first_turn_success_auc']:.3f}")
        for m in ("turns_to_success", "first_turn_score"):
            cells.append(f"{r[f'{m}_final_mean']:.3f} +- {r[f'{m}_final_std']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(curves: dict[str, dict[str, np.ndarray]], args: Args, path: Path) -> None:
    """Learning curves: one panel per metric, one line (mean, band = +-1 std over seeds) per shaper."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {
        "success": "success within 3 turns",
        "first_turn_success": "first-turn success",
        "turns_to_success": "turns to success (given success)",
        "first_turn_score": "E[s_1] (first-turn score)",
    }
    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.2 * len(METRICS), 3.6))
    x = np.arange(args.iterations + 1)
    for ax, m in zip(axes, METRICS, strict=True):
        for shaper, by_metric in curves.items():
            mean, std = by_metric[m].mean(axis=0), by_metric[m].std(axis=0)
            ax.plot(x, mean, label=shaper, lw=1.6)
            ax.fill_between(x, mean - std, mean + std, alpha=0.15)
        ax.set_title(titles[m], fontsize=10)
        ax.set_xlabel("policy update")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Tabular policy on {', '.join(args.tasks)}: {args.seeds} seeds, G={args.group_size}, policy={args.policy}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> Args:
    """Parse the command line into :class:`Args` (one flag per field)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        default = f.default
        if isinstance(default, tuple):
            p.add_argument(f"--{f.name.replace('_', '-')}", default=",".join(default))
        else:
            p.add_argument(f"--{f.name.replace('_', '-')}", type=type(default), default=default)
    ns = vars(p.parse_args(argv))
    for f in dataclasses.fields(Args):
        if isinstance(f.default, tuple):
            ns[f.name] = tuple(s for s in ns[f.name].split(",") if s)
    return Args(**ns)


def main(argv: list[str] | None = None) -> None:
    """Evaluate the pool (cached), train under each shaper, write results and plots."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    outcomes = collect_outcomes(list(args.tasks), args.eval_seeds, out / "evals.json")
    eval_s = time.perf_counter() - start
    model = build_outcome_model(args.tasks, outcomes, lambda t, p: response_key(t, program_response(t, p)))
    responses = [[program_response(t, p) for p in PROGRAMS] for t in args.tasks]
    evaluator = CachedEvaluator(outcomes)
    curves: dict[str, dict[str, np.ndarray]] = {}
    for shaper in args.shapers:
        runs = [train(shaper, seed, args, responses, evaluator, model) for seed in range(args.seeds)]
        curves[shaper] = {m: np.array([r[m] for r in runs]) for m in METRICS}
        log.info(
            "%s: first-turn success %.3f, success %.3f (final, mean over seeds)",
            shaper,
            curves[shaper]["first_turn_success"][:, -1].mean(),
            curves[shaper]["success"][:, -1].mean(),
        )
    learn_s = time.perf_counter() - start - eval_s
    rows = summarize(curves)
    table = markdown_table(rows, args)
    plot(curves, args, out / "learning_curves.png")
    if args.docs_img:
        Path(args.docs_img).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "learning_curves.png", args.docs_img)
    results = {
        "args": dataclasses.asdict(args),
        "seeds": list(range(args.seeds)),
        "programs": list(PROGRAMS),
        "outcomes": model.table,
        "final": rows,
        "curves": {
            s: {
                m: {"mean": a.mean(axis=0).round(4).tolist(), "std": a.std(axis=0).round(4).tolist()}
                for m, a in by.items()
            }
            for s, by in curves.items()
        },
        "seconds": {"evaluations": round(eval_s, 1), "learning": round(learn_s, 1)},
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(table)
    print(table)
    print(f"evaluations {eval_s:.0f} s (cached in {out / 'evals.json'}), learning {learn_s:.0f} s; wrote {out}")


if __name__ == "__main__":
    main()
