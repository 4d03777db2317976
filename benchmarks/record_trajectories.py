"""Record the small trajectory files shipped in ``tests/data/trajectories/`` by really running KernelGen-v0.

Scripted policies (programs from ``candidate_pool.py``) play episodes through the real env and the real
``LocalEvaluator`` (compiled builds are cached, so a rerun costs seconds once the pool was built), wrapped in
:class:`musaenv.recording.RecordEpisodes`. Files written:

* ``early_and_repair.jsonl`` (l1_relu, one group of 6): first-turn successes (fast, slow), repairs at turn 2 after a
  compile error and after a static cheating refusal, a repair at turn 3, and a failed episode.
* ``all_failed.jsonl`` (l1_softmax, two groups of 4): every episode fails; in group ``b`` every turn scores -1, so
  every shaper's returns are equal there (zero GRPO advantage).
* ``flaky_reference_infra.jsonl``: ``infra_error`` turns produced through the harness's real path: the task is a
  ReLU reference that was made flaky ON PURPOSE (it raises on some random inputs), so the reference worker fails
  and the evaluator reports ``infra_error`` (the environment's fault, masked by every shaper). Episodes are searched
  seed by seed until one has an infra turn followed by a success.

Usage (from the repository root)::

    PYTHONPATH=. python benchmarks/record_trajectories.py [--out tests/data/trajectories]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from candidate_pool import POOL_EVAL_CONFIG, program_response

from musaenv.env import KernelGenEnv
from musaenv.evaluator.local import LocalEvaluator
from musaenv.recording import RecordEpisodes

log = logging.getLogger("record_trajectories")

EARLY_AND_REPAIR = [
    ["fast"],
    ["slow"],
    ["broken", "fast"],
    ["cheat", "slow"],
    ["wrong", "partial", "fast"],
    ["prose", "crash", "partial"],
]
ALL_FAILED = {
    "a": [
        ["broken", "partial", "wrong"],
        ["partial", "partial", "partial"],
        ["cheat", "crash", "broken"],
        ["prose", "wrong", "partial"],
    ],
    "b": [
        ["broken", "crash", "cheat"],
        ["prose", "prose", "wrong"],
        ["cheat", "broken", "crash"],
        ["wrong", "cheat", "prose"],
    ],
}

FLAKY_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU whose reference is flaky on purpose: it raises on some random inputs (an infra failure)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x[0, 0]) > 1.2:
            raise RuntimeError("simulated reference failure (flaky on purpose, to record an infra_error)")
        return torch.relu(x)


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def play(env: RecordEpisodes, task: str, programs: list[str], seed: int, group: str) -> list[str]:
    """One scripted episode; returns the verdict stages."""
    env.reset(seed=seed, options={"task": task, "group": group})
    stages = []
    for program in programs:
        _, _, terminated, truncated, info = env.step(program_response(_solution_task(task), program))
        stages.append(info["eval"]["stage"])
        if terminated or truncated:
            break
    return stages


def _solution_task(task: str) -> str:
    """The built-in task whose solution a task's programs come from (the flaky ReLU reuses l1_relu's)."""
    return "l1_relu" if task.endswith("flaky_relu.py") else task


def record_flaky(ev: LocalEvaluator, out: Path, attempts: int = 12) -> None:
    """Search seeds until an episode has an infra_error turn followed by a correct one (or attempts run out)."""
    with tempfile.TemporaryDirectory() as tmp:
        task = str(Path(tmp) / "flaky_relu.py")
        Path(task).write_text(FLAKY_RELU)
        env = RecordEpisodes(
            KernelGenEnv(backend="cpu", max_turns=3, evaluator=ev), out / "flaky_reference_infra.jsonl"
        )
        for seed in range(attempts):
            stages = play(env, task, ["fast", "fast", "fast"], seed, group="flaky_relu")
            log.info("flaky seed %d: %s", seed, stages)
            if stages[0] == "infra_error" and "correct" in stages:
                break
        else:
            log.warning("no episode with an infra_error turn followed by a success in %d attempts", attempts)


def main(argv: list[str] | None = None) -> None:
    """Record the three files (appending to nothing: existing files are replaced)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tests/data/trajectories")
    out = Path(p.parse_args(argv).out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("early_and_repair.jsonl", "all_failed.jsonl", "flaky_reference_infra.jsonl"):
        (out / name).unlink(missing_ok=True)
    with LocalEvaluator("cpu", POOL_EVAL_CONFIG) as ev:
        env = RecordEpisodes(KernelGenEnv(backend="cpu", max_turns=3, evaluator=ev), out / "early_and_repair.jsonl")
        for seed, programs in enumerate(EARLY_AND_REPAIR):
            log.info("early_and_repair %s: %s", programs, play(env, "l1_relu", programs, seed, "l1_relu/a"))
        env = RecordEpisodes(KernelGenEnv(backend="cpu", max_turns=3, evaluator=ev), out / "all_failed.jsonl")
        for group, episodes in ALL_FAILED.items():
            for seed, programs in enumerate(episodes):
                log.info("all_failed %s: %s", programs, play(env, "l1_softmax", programs, seed, f"l1_softmax/{group}"))
        record_flaky(ev, out)


if __name__ == "__main__":
    main()
