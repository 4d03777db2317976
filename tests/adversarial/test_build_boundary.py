"""The build stage and the measurement as a hostile policy meets them (issue #12), checked from outside.

Every hostile case asserts its verdict and that it left nothing behind: no process alive, no new file in ``$HOME``
or site-packages, no file created where its payload aimed, nothing in the shared cache that the parent did not
install (every cached module has the parent's sealed manifest). The honest kernels beside them must be ``correct``.
"""

from __future__ import annotations

import dataclasses
import json
import site
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from musaenv import _env
from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.isolation.integrity import read_sealed
from musaenv.rewards import candidate_score
from musaenv.tasks.builtin import get_task
from musaenv.toolchains.warmup import wait_background
from musaenv.types import EvalResult, Stage
from tests.adversarial import boundary_candidates as bc
from tests.adversarial.containment import become_subreaper, stray_processes

pytestmark = pytest.mark.slow

TIMING = TimingConfig(warmup=1, repeats=5, max_time_s=1.0)
CONFIG = EvalConfig(run_timeout_s=20.0, timing=TIMING)


class StaticOffEvaluator(LocalEvaluator):
    """No static stage: what reaches the build service must still be refused there, in the parent."""

    def _static(self, code: str) -> tuple[str, ...]:
        return ()


def _listing(d: Path) -> set[str]:
    try:
        return {p.name for p in d.iterdir()}
    except OSError:
        return set()


@dataclasses.dataclass
class Boundary:
    full: LocalEvaluator
    static_off: LocalEvaluator
    pwned: Path

    def evaluate(self, ev: LocalEvaluator, source: str, task: str = "l1_relu") -> EvalResult:
        home, sites = _listing(Path.home()), [_listing(Path(p)) for p in site.getsitepackages()]
        before = _cached_modules()
        result = ev.evaluate(get_task(task), source.replace("__PWNED__", str(self.pwned)), seed=3)
        wait_background()  # a header this build went without, built for later ones: ours, and it ends
        assert stray_processes([self.full, self.static_off]) == [], "processes outlived the evaluation"
        assert not self.pwned.exists() and not Path(f"/tmp/{self.pwned}").exists(), "the payload ran"
        assert _listing(Path.home()) == home, "files appeared in $HOME"
        assert [_listing(Path(p)) for p in site.getsitepackages()] == sites, "files appeared in site-packages"
        _assert_installed_by_parent(_cached_modules() - before)
        return result


def _cached_modules() -> set[Path]:
    return set((_env.cache_dir() / "ext").glob("musaenv_*/*.so"))


def _assert_installed_by_parent(modules: set[Path]) -> None:
    for so in modules:
        manifest = read_sealed(so.parent / "manifest.json", "ext")
        assert manifest is not None and manifest["name"] == so.parent.name, f"{so} has no sealed manifest"


@pytest.fixture(scope="module")
def boundary() -> Iterator[Boundary]:
    assert become_subreaper()
    full, static_off = LocalEvaluator("cpu", CONFIG), StaticOffEvaluator("cpu", CONFIG)
    try:
        yield Boundary(full, static_off, Path(f"/tmp/musaenv_pwned_{uuid.uuid4().hex}"))
    finally:
        full.close()
        static_off.close()


def _describe(r: EvalResult) -> str:
    return f"stage={r.stage.value} flags={list(r.flags)} messages={list(r.messages)[:3]} log={r.compiler_log[:300]}"


@pytest.mark.parametrize("name", sorted(bc.FLAG_ATTACKS))
def test_flags_outside_the_allow_list_never_reach_a_compiler(boundary: Boundary, name: str) -> None:
    for ev in (boundary.full, boundary.static_off):  # refused statically, and again by the build service
        r = boundary.evaluate(ev, bc.FLAG_ATTACKS[name])
        assert r.stage is Stage.FORMAT_ERROR, _describe(r)
        assert "not allowed" in " ".join(r.messages) + r.compiler_log, _describe(r)
        assert (candidate_score(r) or 0.0) <= 0


@pytest.mark.parametrize("name", sorted(bc.NAME_ATTACKS))
def test_names_the_cpp_scan_refuses(boundary: Boundary, name: str) -> None:
    source, flag = bc.NAME_ATTACKS[name]
    r = boundary.evaluate(boundary.full, source)
    assert r.stage is Stage.CHEATING and flag in r.flags, _describe(r)


def test_honest_thread_pool_is_correct(boundary: Boundary) -> None:
    r = boundary.evaluate(boundary.full, bc.THREAD_POOL)
    assert r.stage is Stage.CORRECT and not r.flags, _describe(r)
    timing = [u for u in r.extra["cpu"] if u["phase"] == "timing"]
    assert timing and timing[0]["cores"] <= 1.35  # measured from outside: within the reference's one core


def test_honest_vectorized_softmax_is_correct(boundary: Boundary) -> None:
    r = boundary.evaluate(boundary.full, bc.VECTORIZED_SOFTMAX, task="l1_softmax")
    assert r.stage is Stage.CORRECT and not r.flags, _describe(r)


def test_threads_beyond_the_core_budget_buy_no_cores_while_timed(boundary: Boundary) -> None:
    # Pinned by the parent to the reference's one core for the timed calls (and unable to undo it), four busy
    # threads get one core; had pinning failed, the parent's CPU measurement would call it cpu_overuse.
    r = boundary.evaluate(boundary.full, bc.GREEDY_THREADS)
    timing = next(u for u in r.extra["cpu"] if u["phase"] == "timing")
    assert timing["cores"] <= 1.35 or (r.stage is Stage.CHEATING and "cpu_overuse" in r.flags), (timing, _describe(r))
    assert timing["threads_start"] >= 1


def test_tampered_cached_module_is_rebuilt_not_served(boundary: Boundary) -> None:
    first = boundary.evaluate(boundary.full, bc.program())
    assert first.stage is Stage.CORRECT, _describe(first)
    name = first.extra["builds"][0]["name"]
    so = _env.cache_dir() / "ext" / name / f"{name}.so"
    so.write_bytes(so.read_bytes() + b"\0tampered")  # what an unsandboxed payload did to honest modules
    again = boundary.full.evaluate(get_task("l1_relu"), bc.program(), seed=4)
    assert again.stage is Stage.CORRECT, _describe(again)
    assert again.extra["builds"][0]["cached"] is False  # the altered file failed the manifest: rebuilt
    _assert_installed_by_parent({so})


def test_forged_reference_timing_is_remeasured(boundary: Boundary) -> None:
    """The cached reference timing (``reference="dedicated_host"``; paired timing caches none) is sealed: a forged
    entry is measured again and replaced."""
    dedicated = EvalConfig(run_timeout_s=20.0, timing=dataclasses.replace(TIMING, reference="dedicated_host"))
    first = LocalEvaluator("cpu", dedicated)
    try:
        honest = first.evaluate(get_task("l1_relu"), bc.program(), seed=3)
    finally:
        first.close()
    assert honest.stage is Stage.CORRECT and honest.ref_runtime_ms, _describe(honest)
    forged: dict[Path, float] = {}
    for path in (_env.cache_dir() / "reftime").glob("*.json"):
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "body" not in record:
            continue  # unsealed (an older release's cache, a shared /tmp): re-measured anyway
        record["body"]["median_ms"] = record["body"]["median_ms"] * 6  # a 6x slower reference, old HMAC kept
        path.write_text(json.dumps(record))
        forged[path] = record["body"]["median_ms"]
    assert forged
    fresh = LocalEvaluator("cpu", dedicated)  # a new process's view: nothing memoised
    try:
        r = fresh.evaluate(get_task("l1_relu"), bc.program(), seed=5)
    finally:
        fresh.close()
    assert r.stage is Stage.CORRECT and r.ref_runtime_ms is not None, _describe(r)
    assert r.ref_runtime_ms not in forged.values()  # measured again, not read from the forged entry
    remeasured = [p for p in forged if (read_sealed(p, f"reftime:{p.stem}") or {}).get("median_ms") == r.ref_runtime_ms]
    assert remeasured, "the new measurement replaced the forged entry, sealed"
