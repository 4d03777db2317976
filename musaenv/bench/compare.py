"""``musaenv bench compare A B``: a paired comparison of two bench runs that timing noise cannot fake.

Samples are paired by ``(task, sample)``: the same slot of the generations file in both runs. Pairs whose verdict
says nothing about the model (``infra_error``, ``compiled``) in either run are left out. Per task and over all
pairs:

* **correctness**: the discordant pairs (correct in one run only) go to an exact two-sided sign test (McNemar's
  exact test); the effect is the difference of the correct rates, B - A, in points.
* **speed**: for pairs correct and timed in both runs, d = ln(speedup_B / speedup_A); a paired t test on d gives
  the ratio exp(mean d) ("B's kernels run x times as fast as A's") with its confidence interval and p-value.

Per-task p-values are Holm-adjusted over the tasks, so a run of many tasks does not find a "difference" somewhere
by chance. A difference is reported only when its adjusted p-value is below ``alpha`` *and* it is at least
``margin`` (a speed ratio outside [1 / (1 + margin), 1 + margin]; any correctness change), else "no significant
difference". When a task's paired responses are byte-identical in both runs (same ``response_sha256``), the
generations cannot differ: the verdict says so, and a significant speed ratio there is reported as a measurement
shift (machine load, timing setup, baseline), not as one run being better.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from musaenv.bench.metrics import UNSCORED_VERDICTS
from musaenv.bench.stats import PairedT, holm, paired_t, sign_test
from musaenv.bench.store import ResultStore

__all__ = ["ALPHA", "MARGIN", "Pair", "RunComparison", "SideBySide", "compare_dirs", "compare_rows",
           "comparison_markdown"]  # fmt: skip

ALPHA = 0.05
"""Family-wise level of the per-task tests (and the level of the overall tests)."""

MARGIN = 0.05
"""Smallest speed ratio change reported as a difference (5 %): below it, "no significant difference"."""


@dataclass(frozen=True)
class Pair:
    """One sample as both runs judged it.

    Attributes:
        task: Task key.
        sample: Sample index.
        correct_a: Run A's verdict is ``correct``.
        correct_b: Run B's verdict is ``correct``.
        speedup_a: Run A's speedup (``None`` when not correct or not timed).
        speedup_b: Run B's speedup.
        same_response: Both runs judged the same response (equal ``response_sha256``).
    """

    task: str
    sample: int
    correct_a: bool
    correct_b: bool
    speedup_a: float | None
    speedup_b: float | None
    same_response: bool

    @property
    def log_ratio(self) -> float | None:
        """ln(speedup_B / speedup_A) when both are correct and timed with positive finite speedups."""
        a, b = self.speedup_a, self.speedup_b
        if not (self.correct_a and self.correct_b) or a is None or b is None:
            return None
        if not (0 < a < math.inf and 0 < b < math.inf):
            return None
        return math.log(b / a)


@dataclass(frozen=True)
class SideBySide:
    """The paired comparison of one task (or of all pairs, ``task == "all"``).

    Attributes:
        task: Task key, or ``"all"``.
        pairs: Pairs scored in both runs.
        identical: Pairs whose responses are the same in both runs.
        correct_a: Pairs correct in run A.
        correct_b: Pairs correct in run B.
        correct_p: Sign-test p-value of the discordant pairs (Holm-adjusted per task).
        speed: Paired t on ln(speedup_B / speedup_A) (``None`` with fewer than 2 timed pairs).
        speed_p: Its p-value (Holm-adjusted per task).
    """

    task: str
    pairs: int
    identical: int
    correct_a: int
    correct_b: int
    correct_p: float
    speed: PairedT | None
    speed_p: float | None

    def _correct_differs(self, alpha: float) -> bool:
        return self.correct_a != self.correct_b and self.correct_p < alpha

    def _speed_differs(self, alpha: float, margin: float) -> bool:
        s, p = self.speed, self.speed_p
        return s is not None and p is not None and p < alpha and abs(s.mean) >= math.log1p(margin)

    def verdict(self, alpha: float = ALPHA, margin: float = MARGIN) -> str:
        """ "no significant difference", or which run is better and by how much (or a measurement shift)."""
        parts = []
        if self._correct_differs(alpha):
            better = "B" if self.correct_b > self.correct_a else "A"
            points = 100.0 * abs(self.correct_b - self.correct_a) / self.pairs
            parts.append(f"{better} more often correct (+{points:.0f} points, p={self.correct_p:.3g})")
        if self._speed_differs(alpha, margin):
            parts.append(_speed_text(self.speed, self.speed_p))  # type: ignore[arg-type]
        if self.pairs and self.identical == self.pairs:
            shift = f"; measured differently: {'; '.join(parts)}" if parts else ""
            return f"no difference: the same responses in both runs{shift}"
        return "; ".join(parts) or "no significant difference"


def _speed_text(s: PairedT, p: float) -> str:
    ratio, lo, hi = math.exp(s.mean), math.exp(s.low), math.exp(s.high)
    faster = "B" if ratio > 1 else "A"
    times = ratio if ratio > 1 else 1.0 / ratio
    return f"{faster} faster {times:.2f}x (B/A {ratio:.2f}, 95 % CI {lo:.2f}-{hi:.2f}, p={p:.3g})"


@dataclass(frozen=True)
class RunComparison:
    """Result of :func:`compare_rows`: every task and all pairs together.

    Attributes:
        overall: All pairs.
        tasks: One :class:`SideBySide` per task present in both runs, sorted by task.
        only_a: Tasks found in run A only.
        only_b: Tasks found in run B only.
        alpha: Level used.
        margin: Smallest speed change reported.
    """

    overall: SideBySide
    tasks: tuple[SideBySide, ...]
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()
    alpha: float = ALPHA
    margin: float = MARGIN

    def differing_tasks(self) -> list[str]:
        """Tasks whose verdict is a difference between the generations (not "no ... difference")."""
        return [t.task for t in self.tasks if not t.verdict(self.alpha, self.margin).startswith("no ")]


def _pairs(rows_a: Iterable[dict[str, Any]], rows_b: Iterable[dict[str, Any]]) -> list[Pair]:
    by_key = {(str(r["task"]), int(r["sample"])): r for r in rows_a}
    out = []
    for rb in rows_b:
        ra = by_key.get((str(rb["task"]), int(rb["sample"])))
        if ra is None:
            continue
        res_a, res_b = ra.get("result") or {}, rb.get("result") or {}
        stage_a, stage_b = res_a.get("stage", "infra_error"), res_b.get("stage", "infra_error")
        if stage_a in UNSCORED_VERDICTS or stage_b in UNSCORED_VERDICTS:
            continue
        sha_a, sha_b = ra.get("response_sha256"), rb.get("response_sha256")
        out.append(Pair(str(rb["task"]), int(rb["sample"]), stage_a == "correct", stage_b == "correct",
                        _speedup(res_a), _speedup(res_b), sha_a is not None and sha_a == sha_b))  # fmt: skip
    return sorted(out, key=lambda p: (p.task, p.sample))


def _speedup(result: dict[str, Any]) -> float | None:
    v = result.get("speedup")
    return None if v is None else float(v)


def _side(task: str, pairs: list[Pair]) -> SideBySide:
    ca = sum(p.correct_a for p in pairs)
    cb = sum(p.correct_b for p in pairs)
    only_a = sum(p.correct_a and not p.correct_b for p in pairs)
    only_b = sum(p.correct_b and not p.correct_a for p in pairs)
    diffs = [d for p in pairs if (d := p.log_ratio) is not None]
    speed = paired_t(diffs)
    return SideBySide(task, len(pairs), sum(p.same_response for p in pairs), ca, cb, sign_test(only_a, only_b),
                      speed, None if speed is None else speed.p_value)  # fmt: skip


def compare_rows(
    rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], *, alpha: float = ALPHA, margin: float = MARGIN
) -> RunComparison:
    """Pair two runs' ``results.jsonl`` rows and test every task and all pairs (see the module docstring)."""
    pairs = _pairs(rows_a, rows_b)
    tasks_a, tasks_b = {str(r["task"]) for r in rows_a}, {str(r["task"]) for r in rows_b}
    names = sorted({p.task for p in pairs})
    raw = [_side(t, [p for p in pairs if p.task == t]) for t in names]
    correct_adj = holm([s.correct_p for s in raw])
    speed_adj = holm([s.speed_p for s in raw])
    tasks = tuple(
        replace(s, correct_p=float(cp if cp is not None else 1.0), speed_p=sp)
        for s, cp, sp in zip(raw, correct_adj, speed_adj, strict=True)
    )
    return RunComparison(
        overall=_side("all", pairs), tasks=tasks, only_a=tuple(sorted(tasks_a - tasks_b)),
        only_b=tuple(sorted(tasks_b - tasks_a)), alpha=alpha, margin=margin,
    )  # fmt: skip


def compare_dirs(
    dir_a: str | Path, dir_b: str | Path, *, alpha: float = ALPHA, margin: float = MARGIN
) -> RunComparison:
    """:func:`compare_rows` on two run folders' ``results.jsonl``."""
    return compare_rows(ResultStore(dir_a).rows(), ResultStore(dir_b).rows(), alpha=alpha, margin=margin)


def _ratio_cell(s: PairedT | None) -> str:
    if s is None:
        return "-"
    return f"{math.exp(s.mean):.2f} ({math.exp(s.low):.2f}-{math.exp(s.high):.2f}), n={s.n}"


def _row(s: SideBySide, alpha: float, margin: float) -> str:
    p = "-" if s.speed_p is None else f"{s.speed_p:.3g}"
    return (f"| {s.task} | {s.pairs} ({s.identical}) | {s.correct_a} | {s.correct_b} | {s.correct_p:.3g} | "
            f"{_ratio_cell(s.speed)} | {p} | {s.verdict(alpha, margin)} |")  # fmt: skip


def comparison_markdown(c: RunComparison) -> str:
    """The paired comparison as Markdown: all pairs, then one row per task."""
    lines = ["## Paired comparison", "",
             f"Samples paired by (task, sample); speed ratio = B's speedup / A's over pairs correct in both, mean of "
             f"the logs with a 95 % CI; per-task p-values Holm-adjusted; a difference needs p < {c.alpha:g} and, "
             f"for speed, a ratio beyond {1 + c.margin:g}x either way.", "",
             f"**Overall**: {c.overall.verdict(c.alpha, c.margin)}.", "",
             "| task | pairs (same response) | A correct | B correct | correct p | speed B/A (95 % CI) | speed p "
             "| verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    lines += [_row(s, c.alpha, c.margin) for s in (*c.tasks, c.overall)]
    differing = c.differing_tasks()
    lines += ["", f"Tasks with a significant difference: {', '.join(differing) if differing else 'none'}."]
    if c.only_a or c.only_b:
        lines.append(f"Not paired: only in A {list(c.only_a)}, only in B {list(c.only_b)}.")
    return "\n".join(lines) + "\n"
