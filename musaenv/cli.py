"""``musaenv`` command line: list tasks, evaluate a candidate or a model's generations (bench), run the CPU demo, port
CUDA to MUSA, ablate rewards."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from musaenv.backends import BACKENDS
from musaenv.errors import MusaEnvError

__all__ = ["main"]

DEMO_TASK = "l1_relu"


@contextmanager
def progress(label: str, enabled: bool = True) -> Iterator[None]:
    """One long step (a first build, a run): a live bar on a terminal, a heartbeat line every 30 s off it."""
    from musaenv.evaluator.progress import Progress

    with Progress(1, label, enabled=enabled) as bar, bar.working(label):
        yield
        bar.update()


def _cmd_warmup(args: argparse.Namespace) -> int:
    """``musaenv warmup`` with a progress display: each flag set builds for a minute or more, silently."""
    from musaenv.toolchains import warmup

    with _ItemProgress(enabled=True, desc="warmup") as shown:
        return warmup._cmd_warmup(args, starting=shown.starting, finished=shown.finished)


class _ItemProgress:
    """The progress of items whose count is known at the first one (``tasks --dir``'s derivations, minutes per file
    cold; ``warmup``'s builds): a bar, or a line every 30 s naming the item running."""

    def __init__(self, enabled: bool, desc: str = "deriving shapes") -> None:
        self.enabled = enabled
        self.desc = desc
        self.bar: Any = None

    def starting(self, done: int, total: int, task_id: str) -> None:
        if self.bar is None:
            from musaenv.evaluator.progress import Progress

            self.bar = Progress(total, self.desc, enabled=self.enabled)
        self.bar.begin(task_id)

    def finished(self, done: int, total: int, task_id: str) -> None:
        self.bar.end(task_id)
        self.bar.update()

    def __enter__(self) -> _ItemProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def _shapes_text(shapes: Sequence[dict[str, Any]]) -> str:
    return " | ".join(", ".join(f"{k}={v}" for k, v in s.items()) or "file's sizes" for s in shapes)


def _cmd_tasks_dir(args: argparse.Namespace) -> int:
    from musaenv.tasks.derive import ShapeConfig
    from musaenv.tasks.external import listing, load_suite

    default = ShapeConfig()
    config = default.replace(
        cpu_bytes=default.cpu_bytes if args.cpu_mb is None else int(args.cpu_mb * (1 << 20)),
        cpu_forward_ms=default.cpu_forward_ms if args.cpu_ms is None else args.cpu_ms,
    )
    levels = None if args.level is None else (args.level,)

    with _ItemProgress(enabled=not args.json) as shown:
        tasks = load_suite(args.dir, levels=levels, config=config, progress=shown.finished, starting=shown.starting)
    rows = [listing(t) for t in tasks]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        warn = f"  [{', '.join(r['warnings'])}]" if r["warnings"] else ""
        print(f"{r['id']}  (level {r['level']}, {r['dtype']}, atol={r['atol']:g}){warn}")
        for tier in ("cpu", "gpu", "interp"):
            if tier != "interp" or r["shapes"].get(tier):
                print(f"    {tier}: {_shapes_text(r['shapes'].get(tier, []))}")
        if r["warnings"]:  # the flags alone do not say what to fix (a not_derived file's error, a fixed size)
            for note in r["notes"]:
                print(f"    why: {note}")
    single = sum(1 for r in rows if "single_shape" in r["warnings"])
    failed = sum(1 for r in rows if "not_derived" in r["warnings"])
    print(f"{len(rows)} tasks, {single} with a single shape in some tier, {failed} not derived")
    return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    from musaenv.tasks.builtin import builtin_tasks, solution_path

    if args.dir is not None:
        return _cmd_tasks_dir(args)
    tasks = builtin_tasks(level=args.level)
    if args.json:
        rows = [{**t.to_dict(), "has_cpu_solution": solution_path(t.id, "cpu") is not None} for t in tasks]
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'id':<28} {'level':>5}  {'solution':>8}  name")
    for t in tasks:
        has = "cpu" if solution_path(t.id, "cpu") else ""
        print(f"{t.id:<28} {t.level:>5}  {has:>8}  {t.name}")
    print(f"{len(tasks)} tasks")
    return 0


def _print_result(d: dict[str, Any], score: float | None) -> None:
    from musaenv.tasks.prompts import feedback_text

    print(feedback_text(d, score, 20000))
    extras = [f"{k}={d[k]:.3f}" for k in ("compile_time_s", "eval_time_s") if d.get(k) is not None]
    if extras:
        print("(" + ", ".join(extras) + ")")


def add_policy_option(parser: argparse.ArgumentParser) -> None:
    """``--policy``: the verification policy (shared by every subcommand that evaluates)."""
    from musaenv.config import POLICIES

    parser.add_argument(
        "--policy",
        default="strict",
        choices=POLICIES,
        help="verification policy: strict (MooreEval, only tensor plumbing in forward), kernelbench (KernelBench's "
        "rules: some operators may stay in PyTorch), permissive, off (docs/verification.md)",
    )


def _cmd_eval(args: argparse.Namespace) -> int:
    from musaenv.config import EvalConfig
    from musaenv.evaluator.local import LocalEvaluator
    from musaenv.rewards import candidate_score
    from musaenv.tasks.builtin import get_task

    # A reference file gets derived shapes and tiers, like a folder's files (musaenv.tasks.external).
    task = get_task(args.task if args.task else args.reference)
    try:
        response = Path(args.candidate).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise MusaEnvError(f"cannot read candidate file {args.candidate!r}: {e}") from None
    config = EvalConfig(
        tier=args.tier, num_trials=args.trials, static_policy=args.policy, secret_plans=not args.reproducible
    )
    _first_use_note(args.json)
    with LocalEvaluator(args.backend, config) as ev, progress("evaluating", not args.json):
        result = ev.evaluate(task, response, seed=args.seed)
    score = candidate_score(result)
    if args.json:
        print(json.dumps({**result.to_dict(), "score": score}, indent=2))
    else:
        _print_result(result.to_dict(), score)
    return 0


def _demo_responses(task_id: str) -> list[str]:
    """A scripted policy: a broken first attempt (compile error), then the shipped solution."""
    from musaenv.tasks.builtin import solution_source

    good = solution_source(task_id, "cpu")
    # A C++ syntax error at the top of the first source string: the feedback will carry g++'s message.
    start = good.index('r"""') + len('r"""')
    broken = good[:start] + "\nint demo_syntax_error = ;\n" + good[start:]
    return [f"First try:\n```python\n{broken}\n```", f"Fixed the syntax error:\n```python\n{good}\n```"]


def _first_use_note(quiet: bool) -> None:
    from musaenv.toolchains.warmup import first_use_note

    note = None if quiet else first_use_note()
    if note:
        print(note, file=sys.stderr)


def _print_episode_end(info: dict[str, Any]) -> None:
    """What the env paid, step by step, and the shaper's per-turn credit that a trainer uses (not the same)."""
    paid = [round(float(r), 3) for r in info["paid_rewards"]]
    credit = [round(float(r), 3) for r in info["turn_rewards"]]
    print(f"episode over: return {info['episode_return']:.3f}, the sum of the rewards paid per step {paid}")
    print(f"         the shaper's per-turn credit for a trainer {credit}, loss weights {info['loss_weights']}")


def _cmd_demo(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import musaenv  # noqa: F401 - registers the env ids

    env = gym.make("KernelGen-v0", task=args.task, backend="cpu", max_turns=3)
    try:
        obs, info = env.reset(seed=args.seed)
        print(f"== Task {info['task_id']} (tier {info['tier']}), prompt of {len(obs)} characters ==")
        _first_use_note(args.quiet)
        for k, response in enumerate(_demo_responses(args.task), start=1):
            with progress(f"turn {k}: compiling and running", not args.quiet):
                obs, reward, terminated, truncated, info = env.step(response)
            ev = info["eval"]
            speed = f", speedup {ev['speedup']:.2f}x" if ev.get("speedup") else ""
            first_line = (ev.get("compiler_log") or ev.get("runtime_log") or "").strip().splitlines()[:1]
            print(
                f"turn {k}: verdict {ev['stage']}, score {info['score']}, reward {reward:.3f}{speed}"
                f" (compile {ev.get('compile_time_s') or 0:.1f} s, eval {ev.get('eval_time_s') or 0:.1f} s)"
            )
            if first_line:
                print(f"         feedback starts: {first_line[0][:150]}")
            if terminated or truncated:
                _print_episode_end(info)
                break
    finally:
        env.close()
    return 0


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="musaenv", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tasks", help="list the built-in tasks, or a folder of KernelBench-format files")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    t.add_argument("--level", type=int, choices=[1, 2, 3, 4], default=None)
    t.add_argument("--dir", default=None, help="a folder of KernelBench-format files: derive and list their shapes")
    t.add_argument(
        "--cpu-mb", type=float, default=None, help="--dir: cpu-tier inputs + outputs per call, MiB (default 32)"
    )
    t.add_argument("--cpu-ms", type=float, default=None, help="--dir: cpu-tier reference forward, ms (default 20)")
    t.set_defaults(func=_cmd_tasks)
    e = sub.add_parser("eval", help="evaluate one candidate (a raw LLM response or a program)")
    src = e.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", help="built-in task id")
    src.add_argument("--reference", help="path of a KernelBench-format reference program")
    e.add_argument("--candidate", required=True, help="file holding the response or program")
    e.add_argument("--backend", default="auto", choices=list(BACKENDS))
    e.add_argument("--tier", default="auto", choices=["auto", "cpu", "gpu", "interp"])
    e.add_argument("--trials", type=int, default=5)
    e.add_argument("--seed", type=int, default=0, help="seed of the inputs and checks (mixed with a secret)")
    e.add_argument(
        "--reproducible", action="store_true",
        help="plans from --seed alone (no secret): repeatable, but a candidate that learns the seed can predict "
        "which timed calls are checked",
    )  # fmt: skip
    e.add_argument("--json", action="store_true", help="print the EvalResult as JSON")
    add_policy_option(e)
    e.set_defaults(func=_cmd_eval)
    d = sub.add_parser("demo", help="one multi-turn CPU episode with a scripted policy")
    d.add_argument("--task", default=DEMO_TASK)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--quiet", action="store_true", help="no progress display")
    d.set_defaults(func=_cmd_demo)
    for register in _optional_subcommands():
        register(sub)
    if "warmup" in sub.choices:  # the build package cannot import the progress display (a layer above it)
        sub.choices["warmup"].set_defaults(func=_cmd_warmup)
    return p


def _optional_subcommands() -> list[Callable[[Any], None]]:
    found = []
    for module, fn in (
        ("musaenv.backends.musa_port", "add_port_subparser"),
        ("musaenv.tools.ablate", "add_ablate_subparser"),
        ("musaenv.bench.cli", "add_bench_subparser"),
        ("musaenv.rl.dataset", "add_dataset_subparser"),
        ("musaenv.rl.adapters.openenv_server", "add_serve_subparser"),
        ("musaenv.toolchains.warmup", "add_warmup_subparser"),
    ):
        try:
            mod = __import__(module, fromlist=[fn])
        except ImportError:
            continue
        if hasattr(mod, fn):
            found.append(getattr(mod, fn))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (non-zero only for usage or harness errors)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():  # SIGTERM stops like Ctrl-C: workers and builds too
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.func(args))
    except MusaEnvError as e:
        print(f"musaenv: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("musaenv: interrupted", file=sys.stderr)
        return 130


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
