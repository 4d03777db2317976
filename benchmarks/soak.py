"""Soak run: vector envs of ``KernelGen-v0`` stepped many times with honest, broken and hostile responses.

Each env step draws one response from a fixed mix (seeded): the shipped l1_relu solution (honest), broken ones (a
wrong kernel, a compile error, a Python exception, random text) and hostile ones from the adversarial suite
(segfault, fork storm, subprocess, 64 GiB allocation, network, busy loop, constant outputs, global-state tampering).
It reports the steps, the verdict counts, and what the parent process holds at the start (after one warm-up step)
and at the end: RSS, open file descriptors, live child processes, and the size of the cache directory. After the
envs are closed no child may be left.

Usage: ``python benchmarks/soak.py [--steps 1000] [--envs 2] [--out out/soak.json]`` (``--steps`` counts env
steps: evaluations, plus the reset steps of autoreset). The CI test ``tests/integration/test_soak.py`` runs a short
version of :func:`run_soak` and asserts no leaked process or descriptor and bounded memory growth.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the adversarial suite's candidates are rendered by tests.adversarial.hostile_kernels
    sys.path.insert(0, str(ROOT))

from musaenv import _env  # noqa: E402
from musaenv.config import EvalConfig, TimingConfig  # noqa: E402
from musaenv.isolation.proctree import descendants, is_zombie  # noqa: E402
from musaenv.tasks.builtin import solution_source  # noqa: E402
from musaenv.toolchains.warmup import background_tree  # noqa: E402
from musaenv.vector import make_vector_env  # noqa: E402

TASK = "l1_relu"
# Short limits keep the busy loop's share of the run small; the defences are all at their defaults.
CONFIG = EvalConfig(num_trials=2, run_timeout_s=5.0, timing=TimingConfig(warmup=1, repeats=3, max_time_s=0.3))
HOSTILE = ("h_segfault", "h_fork_storm", "h_subprocess", "h_big_alloc", "h_network", "h_infinite_loop",
           "s06_zeros_tiny", "s07_identity", "t09_global_threads")  # fmt: skip
# Weights of the kinds of response (busy loops and builds cost seconds; the mix keeps the run near 1 s a step).
WEIGHTS = {"honest": 0.4, "broken": 0.3, "hostile": 0.3}


def responses() -> dict[str, list[tuple[str, str]]]:
    """The responses by kind: ``{kind: [(name, text), ...]}``."""
    from tests.adversarial.hostile_kernels import render

    honest = solution_source(TASK, "cpu")
    broken = [
        ("wrong_kernel", honest.replace("v > 0.0f ? v : 0.0f", "v > 0.0f ? v : 0.5f * v")),
        ("compile_error", honest.replace("auto out = torch::empty_like(x);", "auto out = torch::empty_like(x)")),
        ("python_error", honest.replace("class ModelNew", "raise RuntimeError('broken on purpose')\nclass ModelNew")),
    ]
    return {"honest": [("honest", honest)], "broken": broken, "hostile": [(h, render(h)) for h in HOSTILE]}


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 400)))


def _pick(rng: random.Random, pool: dict[str, list[tuple[str, str]]]) -> tuple[str, str]:
    kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    if kind == "broken" and rng.random() < 0.25:
        return "random_text", _random_text(rng)
    return rng.choice(pool[kind])


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def _children() -> tuple[set[int], set[int]]:
    """Live and unreaped (zombie) processes below this one, less background header builds (ours, ending on their
    own)."""
    kids = set(descendants(os.getpid())) - background_tree()
    zombies = {p for p in kids if is_zombie(p)}
    return kids - zombies, zombies


def snapshot() -> dict[str, Any]:
    """What this process holds now: RSS (MB), open descriptors, live and unreaped children, cache size (MB)."""
    live, zombies = _children()
    status = Path("/proc/self/status").read_text().splitlines()
    rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {
        "rss_mb": round(rss_kb / 1024, 1),
        "open_fds": len(os.listdir("/proc/self/fd")),
        # a background header build (for later candidates) is ours and ends on its own: not a leak; exited
        # children not yet reaped (zombies, e.g. left by whatever ran earlier in this process) are counted apart
        "children": len(live),
        "zombies": len(zombies),
        "cache_mb": round(_dir_bytes(_env.cache_dir()) / 2**20, 1),
    }


def run_soak(steps: int, num_envs: int = 2, seed: int = 0) -> dict[str, Any]:
    """Step ``num_envs`` vector envs until ``steps`` env steps were taken; returns counts and snapshots."""
    rng = random.Random(seed)
    pool = responses()
    before = set.union(*_children())  # what this process ran already (a test session's other evaluators, Ray) is not
    # the soak's, whether it lives on or exits (unreaped) meanwhile
    envs = make_vector_env(num_envs, backend="cpu", task=TASK, eval_config=CONFIG, max_turns=3)
    verdicts: Counter[str] = Counter()
    by_response: dict[str, Counter[str]] = {}
    taken = evaluations = 0
    t0 = time.monotonic()
    try:
        envs.reset(seed=seed)
        start: dict[str, Any] | None = None
        while taken < steps:
            picks = [_pick(rng, pool) for _ in range(num_envs)]
            _, _, _, _, infos = envs.step([text for _, text in picks])
            for i, (name, _) in enumerate(picks):
                stage = _stage_of(infos, i)
                if stage is not None:
                    verdicts[stage] += 1
                    by_response.setdefault(name, Counter())[stage] += 1
                    evaluations += 1
            taken += num_envs
            if start is None:
                start = snapshot()  # after one step: the pool, fork server and workers are up
        end = snapshot()
    finally:
        envs.close()
    closed = snapshot()
    live, zombies = _children()
    closed["left"] = sorted(live - before)  # started by the soak and still alive after close
    closed["unreaped"] = sorted(zombies - before)  # started by the soak, exited, never waited for
    assert start is not None
    return {
        "steps": taken, "evaluations": evaluations, "num_envs": num_envs, "seconds": round(time.monotonic() - t0, 1),
        "verdicts": dict(verdicts), "by_response": {k: dict(v) for k, v in by_response.items()},
        "start": start, "end": end, "after_close": closed,
    }  # fmt: skip


def _stage_of(infos: dict[str, Any], i: int) -> str | None:
    """The verdict of env ``i`` in a vector step's infos (``None`` on an autoreset step)."""
    evals = infos.get("eval")
    if not isinstance(evals, dict) or "stage" not in evals:
        return None
    mask = evals.get("_stage")
    if mask is not None and not mask[i]:
        return None
    return str(evals["stage"][i])


def main(argv: list[str] | None = None) -> int:
    """Entry point: run, print a summary, write JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--envs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out/soak.json"))
    a = p.parse_args(argv)
    report = run_soak(a.steps, a.envs, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("steps", "evaluations", "seconds", "verdicts")}))
    for when in ("start", "end", "after_close"):
        print(f"{when:>12}: {report[when]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
