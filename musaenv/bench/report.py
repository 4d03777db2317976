"""What a bench run folder reports: ``summary.json``, ``summary.md``, plots, and two runs side by side."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from musaenv.bench.compare import ALPHA, MARGIN, compare_dirs, comparison_markdown
from musaenv.bench.metrics import Outcome, summarize
from musaenv.bench.store import RUN_FILE, ResultStore
from musaenv.errors import MusaEnvError

__all__ = ["compare_runs", "load_summary", "outcomes_from_rows", "summary_markdown", "write_reports"]

log = logging.getLogger(__name__)

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"


def outcomes_from_rows(rows: Iterable[dict[str, Any]]) -> list[Outcome]:
    """The metric inputs of ``results.jsonl`` rows."""
    out = []
    for row in rows:
        r = row.get("result") or {}
        speedup, low = r.get("speedup"), r.get("speedup_low")
        out.append(
            Outcome(
                task=str(row["task"]),
                level=int(row.get("level") or 1),
                stage=str(r.get("stage", "infra_error")),
                speedup=None if speedup is None else float(speedup),
                pass_fraction=float(r.get("pass_fraction") or 0.0),
                speedup_low=None if low is None else float(low),
                build_tier=r.get("build_tier"),
                build_s=_build_s(r),
            )
        )
    return out


def _build_s(result: dict[str, Any]) -> float | None:
    """Seconds of a result's builds that ran (cache hits left out); ``None`` when none ran."""
    builds = [b for b in (result.get("extra") or {}).get("builds") or () if isinstance(b, dict)]
    ran = [float(b.get("seconds") or 0.0) for b in builds if not b.get("cached")]
    return sum(ran) if ran else None


def _baseline(out_dir: Path) -> str | None:
    try:
        record = json.loads((out_dir / RUN_FILE).read_text())
        return str(record["config"]["timing"]["baseline"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_reports(out_dir: str | Path, plots: bool = True) -> dict[str, Any]:
    """Summarise ``out_dir/results.jsonl`` into ``summary.json`` and ``summary.md`` (and plots); returns the summary."""
    d = Path(out_dir)
    outs = outcomes_from_rows(ResultStore(d).rows())
    summary = {"baseline": _baseline(d), **summarize(outs)}
    (d / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    made: list[str] = []
    if plots:
        from musaenv.bench.plots import write_plots

        made = write_plots(d, outs, summary)
    (d / SUMMARY_MD).write_text(summary_markdown(summary, title=f"musaenv bench: {d.name}", plots=made))
    return summary


def load_summary(out_dir: str | Path) -> dict[str, Any]:
    """``summary.json`` of a run folder (recomputed from ``results.jsonl`` when missing).

    Raises:
        MusaEnvError: the folder holds no results.
    """
    d = Path(out_dir)
    if (d / SUMMARY_JSON).exists():
        loaded: dict[str, Any] = json.loads((d / SUMMARY_JSON).read_text())
        return loaded
    rows = ResultStore(d).rows()
    if not rows:
        raise MusaEnvError(f"{d}: no summary.json and no results.jsonl rows; is it a `musaenv bench --out` folder?")
    return {"baseline": _baseline(d), **summarize(outcomes_from_rows(rows))}


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{100 * v:.1f} %" if pct else f"{v:.3f}"
    return str(v)


def _metric_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    base = s.get("baseline") or "eager"
    rows = [
        ("tasks", _fmt(s["tasks"])),
        ("samples (scored)", f"{s['samples']} ({s['scored_samples']})"),
        ("correct rate", _fmt(s["correct_rate"], pct=True)),
    ]
    rows += [(f"pass@{k}", _fmt(v, pct=True)) for k, v in s["pass_at_k"].items()]
    rows += [(f"Avg@{k}", _fmt(v, pct=True)) for k, v in s["avg_at_k"].items()]
    rows.append(("mean trial pass fraction", _fmt(s["mean_trial_pass_fraction"], pct=True)))
    rows += [(f"fast_{p} (vs {base})", _fmt(v, pct=True)) for p, v in s["fast_p"].items()]
    rows.append((f"geomean speedup of correct (vs {base})", _fmt(s["geomean_speedup"])))
    return rows


def summary_markdown(s: dict[str, Any], title: str = "musaenv bench", plots: Sequence[str] = ()) -> str:
    """The summary as Markdown: metrics, verdict counts, one line per level, the plots."""
    lines = [f"# {title}", "", "| metric | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in _metric_rows(s)]
    lines += ["", "## Verdicts", "", "| verdict | samples |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in s["verdicts"].items()]
    lines += ["", "## By level", "", "| level | tasks | samples | correct rate | pass@1 | fast_1.0 | geomean speedup |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for lv, b in s["by_level"].items():
        lines.append(
            f"| {lv} | {b['tasks']} | {b['samples']} | {_fmt(b['correct_rate'], True)} | "
            f"{_fmt(b['pass_at_k'].get('1'), True)} | {_fmt(b['fast_p'].get('1.0'), True)} | "
            f"{_fmt(b['geomean_speedup'])} |"
        )
    if any(v for k, v in s["verdicts"].items() if k in ("infra_error", "compiled")):
        lines += ["", "infra_error and compiled samples are counted above but left out of every rate."]
    if s.get("build_tiers"):  # summaries written before tiers were recorded have none
        lines += ["", "## Build paths", "", "| tier | samples | share | built (not cached) | median build s |"]
        lines.append("| --- | --- | --- | --- | --- |")
        for tier, t in s["build_tiers"].items():
            lines.append(
                f"| {tier} | {t['samples']} | {_fmt(t['share'], True)} | {t['built']} | {_fmt(t['median_build_s'])} |"
            )
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(lines) + "\n"


def compare_runs(dir_a: str | Path, dir_b: str | Path, *, alpha: float = ALPHA, margin: float = MARGIN) -> str:
    """Two run folders side by side (Markdown): every metric, then the paired comparison per task and overall.

    The metrics are each run's own; whether the runs differ is decided only by the paired tests of
    :mod:`musaenv.bench.compare` (same samples in both runs), never by comparing the metrics' values.
    """
    a, b = load_summary(dir_a), load_summary(dir_b)
    lines = [f"# A = {dir_a}, B = {dir_b}", "", "| metric | A | B |", "| --- | --- | --- |"]
    rows_b = dict(_metric_rows(b))
    lines += [f"| {k} | {v} | {rows_b.get(k, '-')} |" for k, v in _metric_rows(a)]
    lines += [f"| {k} | - | {v} |" for k, v in _metric_rows(b) if k not in dict(_metric_rows(a))]
    comparison = compare_dirs(dir_a, dir_b, alpha=alpha, margin=margin)
    if not comparison.overall.pairs:
        lines += ["", "No sample is scored in both runs (paired by task and sample): no paired comparison."]
        return "\n".join(lines) + "\n"
    return "\n".join(lines) + "\n\n" + comparison_markdown(comparison)
