"""``musaenv bench``: score a file of generations; ``musaenv bench compare A B``: two runs side by side.

The evaluation options are one table (:data:`EVAL_OPTIONS`): a flag, its argparse settings, and the
:class:`~musaenv.config.EvalConfig` fields it sets, so a new option (a verification policy, say) is one row.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.backends import BACKENDS
from musaenv.config import POLICIES
from musaenv.errors import MusaEnvError

__all__ = ["EVAL_OPTIONS", "EvalOption", "add_bench_subparser", "add_eval_options", "eval_config_from_args"]


@dataclass(frozen=True)
class EvalOption:
    """One command-line flag that sets :class:`~musaenv.config.EvalConfig` fields.

    Attributes:
        flag: The flag (``--tier``).
        fields: Dotted config fields it sets (``timing.baseline``); ``None`` leaves the config's default.
        kwargs: :meth:`argparse.ArgumentParser.add_argument` settings (``default`` should be ``None`` or the
            config's default).
    """

    flag: str
    fields: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


EVAL_OPTIONS: tuple[EvalOption, ...] = (
    EvalOption(
        "--policy",
        ("static_policy",),
        {"default": "strict", "choices": list(POLICIES), "help": "verification policy (docs/verification.md)"},
    ),
    EvalOption(
        "--reproducible",
        ("secret_plans",),
        {
            "action": "store_const",
            "const": False,
            "default": None,
            "help": "plans from --seed alone (no secret mixed in): repeatable runs, predictable checks",
        },
    ),
    EvalOption("--tier", ("tier",), {"default": "auto", "choices": ["auto", "cpu", "gpu"], "help": "size tier"}),
    EvalOption("--trials", ("num_trials",), {"type": int, "default": 5, "help": "correctness trials per sample"}),
    EvalOption(
        "--baseline",
        ("timing.baseline",),
        {"default": "eager", "choices": ["eager", "compile"], "help": "what speedups are measured against"},
    ),
    EvalOption(
        "--timeout",
        ("run_timeout_s", "timing_timeout_s"),
        {
            "type": float,
            "default": None,
            "metavar": "S",
            "help": "limit (s) on a sample's correctness trials, and on its timing; past it the verdict is timeout",
        },
    ),
)


def add_eval_options(p: argparse.ArgumentParser) -> None:
    """Add ``--backend`` and every :data:`EVAL_OPTIONS` flag to ``p``."""
    p.add_argument("--backend", default="auto", choices=list(BACKENDS))
    for opt in EVAL_OPTIONS:
        p.add_argument(opt.flag, **opt.kwargs)


def eval_config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~musaenv.config.EvalConfig` that the :data:`EVAL_OPTIONS` flags in ``args`` describe."""
    from musaenv.config import EvalConfig

    d = EvalConfig().to_dict()
    for opt in EVAL_OPTIONS:
        value = getattr(args, opt.flag.lstrip("-").replace("-", "_"))
        if value is None:
            continue
        for dotted in opt.fields:
            *parents, leaf = dotted.split(".")
            target = d
            for part in parents:
                target = target[part]
            target[leaf] = value
    return EvalConfig.from_dict(d)


def add_bench_subparser(sub: Any) -> None:
    """Register ``bench`` on the ``musaenv`` command's subparsers."""
    b = sub.add_parser(
        "bench",
        help="evaluate a model's generations in bulk: pass@k, fast_p, Avg@k (see docs/bench.md)",
        description="musaenv bench GENERATIONS --out DIR, or musaenv bench compare DIR_A DIR_B",
    )
    b.add_argument("generations", help="JSONL of samples, a KernelBench generations folder, or `compare`")
    b.add_argument("dirs", nargs="*", help="with `compare`: the two run folders")
    b.add_argument("--out", help="run folder (results.jsonl, summary.json, summary.md, plots)")
    b.add_argument("--tasks", help="KernelBench checkout resolving a generations folder's problems")
    add_eval_options(b)
    b.add_argument("--workers", type=int, default=None, help="builds at once (with --ray: execution actors)")
    b.add_argument("--ray", action="store_true", help="evaluate on Ray (RAY_ADDRESS joins a cluster)")
    b.add_argument("--limit", type=int, default=None, help="evaluate at most N of the missing samples")
    b.add_argument("--resume", action="store_true", help="continue the run in --out (skip samples already there)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--no-plots", action="store_true", help="no PNG plots")
    b.add_argument("--quiet", action="store_true", help="no progress display")
    b.add_argument("--alpha", type=float, default=0.05,
                   help="with `compare`: level of the paired tests (per-task tests Holm-adjusted)")  # fmt: skip
    b.add_argument("--margin", type=float, default=0.05,
                   help="with `compare`: smallest speed ratio change reported, 0.05 = 5 %%")  # fmt: skip
    b.add_argument("--progress-interval", type=float, default=30.0, metavar="S",
                   help="seconds between progress lines when not on a terminal")  # fmt: skip
    b.set_defaults(func=_cmd_bench)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.generations == "compare" and not Path("compare").exists():
        return _cmd_compare(args)
    if args.dirs:
        raise MusaEnvError(f"unexpected arguments {args.dirs}; usage: musaenv bench GENERATIONS --out DIR")
    if not args.out:
        raise MusaEnvError("--out DIR is required: the folder that gets results.jsonl and the summary")
    if args.limit is not None and args.limit < 0:
        raise MusaEnvError(f"--limit: expected a number >= 0, found {args.limit}")
    from musaenv.bench.inputs import load_generations
    from musaenv.bench.report import summary_markdown, write_reports
    from musaenv.bench.runner import BenchOptions, run_bench

    samples = load_generations(args.generations, args.tasks)
    options = BenchOptions(
        backend=args.backend, config=eval_config_from_args(args), workers=args.workers, ray=args.ray,
        seed=args.seed, limit=args.limit, resume=args.resume, progress=not args.quiet,
        progress_interval_s=args.progress_interval,
    )  # fmt: skip
    _log_to_stderr()
    try:
        stats = run_bench(samples, args.out, options)
    except KeyboardInterrupt:
        print(f"interrupted; the results so far are in {args.out}; add --resume to continue", file=sys.stderr)
        return 130
    summary = write_reports(args.out, plots=not args.no_plots)
    print(summary_markdown(summary, title=f"musaenv bench: {args.out}"), end="")
    print(
        f"\n{stats.samples} samples: {stats.already_done} already in {args.out}, {stats.evaluated} evaluated, "
        f"{stats.copied} identical to another (result copied), {stats.left} left (--limit) "
        f"in {stats.seconds:.1f} s; results in {Path(args.out) / 'results.jsonl'}"
    )
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    if len(args.dirs) != 2:
        raise MusaEnvError(f"usage: musaenv bench compare DIR_A DIR_B (found {len(args.dirs)} folders)")
    from musaenv.bench.report import compare_runs

    if not 0 < args.alpha < 1 or args.margin < 0:
        raise MusaEnvError(f"--alpha: expected 0 < alpha < 1, --margin >= 0; found {args.alpha}, {args.margin}")
    print(compare_runs(*args.dirs, alpha=args.alpha, margin=args.margin), end="")
    return 0


def _log_to_stderr() -> None:
    """Progress and admission waits (INFO) and warnings on stderr, unless the caller configured logging already."""
    if not logging.getLogger().hasHandlers():
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
        logging.getLogger("musaenv.progress").setLevel(logging.INFO)
        # waits for a build or run slot (memory short, or every slot busy): a person watching sees why it paused
        logging.getLogger("musaenv.toolchains.admission").setLevel(logging.INFO)
