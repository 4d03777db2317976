"""Kill any part at any moment (SIGKILL): nothing of musaenv's survives it, every request still gets a result, and
the next evaluation is right. Parts: the CLI (the evaluator's own process), a builder, the fork server, a candidate
worker and the reference worker, each at a few moments of an evaluation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator import awake
from musaenv.evaluator.local import LocalEvaluator
from musaenv.isolation import tempdirs
from musaenv.isolation.proctree import descendants
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.toolchains.warmup import background_tree
from musaenv.types import Stage

pytestmark = pytest.mark.slow

TASK = "l1_relu"
CFG = EvalConfig(num_trials=2, timing=TimingConfig(warmup=1, repeats=3, max_time_s=0.3))
SETTLE_S = 10.0  # "within a few seconds"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (everything musaenv started inherits it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if tag.encode() in Path(f"/proc/{entry}/environ").read_bytes() and _alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _settles(probe: Callable[[], list[int]], timeout_s: float = SETTLE_S) -> list[int]:
    """What ``probe`` still finds after up to ``timeout_s`` (empty once everything is gone)."""
    deadline = time.monotonic() + timeout_s
    left = probe()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = probe()
    return [p for p in left if _alive(p)]


class _Killer(threading.Thread):
    """SIGKILLs what ``find`` returns, ``after_s`` seconds after it first returns something."""

    def __init__(self, find: Callable[[], list[int]], after_s: float) -> None:
        super().__init__(daemon=True)
        self.find, self.after_s, self.killed, self.stop = find, after_s, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and not self.find():
            time.sleep(0.01)
        if self.stop.wait(self.after_s):
            return
        for pid in self.find():
            try:
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
            except ProcessLookupError:
                pass


def _unique_relu() -> str:
    return solution_source(TASK, "cpu").replace(
        "#include <torch/extension.h>", f"#include <torch/extension.h>\n// {uuid.uuid4().hex}", 1
    )


@pytest.fixture(scope="module")
def ev() -> Iterator[LocalEvaluator]:
    e = LocalEvaluator("cpu", CFG)
    warm = e.evaluate(get_task(TASK), solution_source(TASK, "cpu"), seed=1)
    assert warm.stage is Stage.CORRECT, warm.to_dict()
    yield e
    e.close()


def _known(e: LocalEvaluator) -> set[int]:
    """The evaluator's standing processes: fork server(s), spare worker, reference worker, parked awake keepers."""
    known = {s.proc.pid for s in (e._server, e._reference.fork_server) if s is not None} | awake.parked_pids()
    if e._spare is not None:
        known.add(e._spare.pid)
    ref = getattr(e._reference, "_worker", None)
    if ref is not None:
        known.add(ref.pid)
    return known


def _builders() -> list[int]:
    ours = background_tree()  # a background header build is not the evaluation's builder
    return [p for p in descendants(os.getpid()) if p not in ours and "musaenv.toolchains.builder" in _cmdline(p)]


def _run_with_killer(
    e: LocalEvaluator, code: str, find: Callable[[], list[int]], after_s: float
) -> tuple[Stage, list[int]]:
    killer = _Killer(find, after_s)
    killer.start()
    try:
        r = e.evaluate(get_task(TASK), code, seed=2)
    finally:
        killer.stop.set()
        killer.join()
    return r.stage, killer.killed


def _our_dirs(root: Path | None = None) -> set[Path]:
    """Worker and fork-server directories under ``root`` (the temp dir) that name this process as owner."""
    root = root or Path(tempfile.gettempdir())
    mine = f"{os.getpid()} "
    out = set()
    for d in root.glob("musaenv-*"):
        try:
            if (d / tempdirs.OWNER_FILE).read_text().startswith(mine):
                out.add(d)
        except OSError:
            continue
    return out


def _known_dirs(e: LocalEvaluator) -> set[Path]:
    ref = getattr(e._reference, "_worker", None)
    return {w.workdir for w in (e._spare, ref) if w is not None}


def _then_clean_and_right(e: LocalEvaluator, code: str, dirs_before: set[Path] | None = None) -> None:
    stray = _settles(lambda: [p for p in descendants(os.getpid()) if p not in _known(e) | background_tree()])
    assert not stray, [(p, _cmdline(p)) for p in stray]
    if dirs_before is not None:  # the killed worker's directory went with it; only standing workers' remain
        left = _our_dirs() - dirs_before - _known_dirs(e)
        assert not left, left
    again = e.evaluate(get_task(TASK), code, seed=3)
    assert again.stage is Stage.CORRECT, again.to_dict()


@pytest.mark.parametrize("after_s", [0.0, 1.0])
def test_kill_builder(ev: LocalEvaluator, after_s: float) -> None:
    code = _unique_relu()  # a cache miss: a build runs
    stage, killed = _run_with_killer(ev, code, _builders, after_s)
    assert stage is (Stage.INFRA_ERROR if killed else Stage.CORRECT), (stage, killed)
    assert not _settles(_builders)
    _then_clean_and_right(ev, code)


@pytest.mark.parametrize("after_s", [0.05, 0.6])
def test_kill_candidate_worker(ev: LocalEvaluator, after_s: float) -> None:
    def active() -> list[int]:
        server = ev._server.proc.pid if ev._server is not None else -1
        kids = [p for p in descendants(server)] if server > 0 else []
        return [p for p in kids if p not in _known(ev)]

    before = _our_dirs() - _known_dirs(ev)  # the standing workers' directories must go if they are killed
    stage, _ = _run_with_killer(ev, solution_source(TASK, "cpu"), active, after_s)
    # a worker that dies under a candidate is that candidate's runtime error (it could have killed itself)
    assert stage in (Stage.CORRECT, Stage.RUNTIME_ERROR, Stage.INFRA_ERROR), stage
    _then_clean_and_right(ev, solution_source(TASK, "cpu"), before)


@pytest.mark.parametrize("after_s", [0.0, 0.5])  # before its run, and (on a warm cache) during it
def test_kill_reference_worker(ev: LocalEvaluator, after_s: float) -> None:
    def ref() -> list[int]:
        w = getattr(ev._reference, "_worker", None)
        return [w.pid] if w is not None and _alive(w.pid) else []

    before = _our_dirs() - _known_dirs(ev)  # the standing workers' directories must go if they are killed
    stage, _ = _run_with_killer(ev, solution_source(TASK, "cpu"), ref, after_s)
    assert stage in (Stage.CORRECT, Stage.INFRA_ERROR), stage  # the reference is retried once on a fresh worker
    _then_clean_and_right(ev, solution_source(TASK, "cpu"), before)


@pytest.mark.parametrize("after_s", [0.3])
def test_kill_fork_server(ev: LocalEvaluator, after_s: float) -> None:
    def server() -> list[int]:
        return [ev._server.proc.pid] if ev._server is not None and _alive(ev._server.proc.pid) else []

    stage, _ = _run_with_killer(ev, solution_source(TASK, "cpu"), server, after_s)
    assert stage in (Stage.CORRECT, Stage.INFRA_ERROR), stage  # its workers die with it
    _then_clean_and_right(ev, solution_source(TASK, "cpu"))


def test_kill_fork_server_between_evaluations(ev: LocalEvaluator) -> None:
    # Idle, the server holds the spare candidate worker and the reference worker, both of which die with it: the
    # candidate side and the reference service must each start a new server, not ask the dead one (CI: the next
    # evaluation was infra_error, "the reference worker did not start").
    assert ev.evaluate(get_task(TASK), solution_source(TASK, "cpu"), seed=4).stage is Stage.CORRECT
    assert ev._server is not None
    os.kill(ev._server.proc.pid, signal.SIGKILL)
    ev._server.proc.wait()
    _then_clean_and_right(ev, solution_source(TASK, "cpu"))


_BUSY = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        n = 0
        while True:
            n += 1
"""


@pytest.mark.parametrize(("moment", "candidate"), [("build", "unique"), ("run", "busy"), ("run+server", "busy")])
def test_kill_cli(tmp_path: Path, moment: str, candidate: str) -> None:
    """SIGKILL the CLI mid-build or mid-run: its builder, compilers, fork server and workers are all gone soon, and
    the next musaenv process's sweep removes the temporary directories the dead CLI could not."""
    tag = f"MUSAENV_KILL_TEST={uuid.uuid4().hex}"
    path = tmp_path / "cand.py"
    path.write_text(_unique_relu() if candidate == "unique" else _BUSY)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, tag.split("=")[0]: tag.split("=")[1], "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "musaenv.cli", "eval", "--task", TASK, "--candidate", str(path), "--policy", "off"]
    proc = subprocess.Popen(cmd, env=env, cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip

    def ready() -> bool:
        procs = [_cmdline(p) for p in _tagged(tag)]
        if moment == "build":
            return any("musaenv.toolchains.builder" in c for c in procs)
        # "run", "run+server": the candidate spins in a forked worker
        return any(_busy_worker(p) for p in _tagged(tag) if p != proc.pid)

    deadline = time.monotonic() + 240
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the evaluation ended before the moment to kill it"
    if moment == "run+server":  # as Ray kills a dead actor's children: the server goes first, it cannot clean up
        servers = [p for p in _tagged(tag) if "musaenv.isolation.forkserver" in _cmdline(p) and not _is_fork(p)]
        for p in servers:  # found first: once a server is gone its orphaned workers no longer look forked
            os.kill(p, signal.SIGKILL)
    proc.kill()
    proc.wait()
    left = _settles(lambda: _tagged(tag))
    described = [(p, _cmdline(p)) for p in left]
    for p in left:  # a failing test leaves nothing running either
        os.kill(p, signal.SIGKILL)
    assert not left, described
    orphaned = sorted(d.name for d in tmp.glob("musaenv-*"))
    assert any(n.startswith("musaenv-forkserver-") for n in orphaned), orphaned  # the dead CLI's, still there
    swept = subprocess.run([sys.executable, "-c", "from musaenv.isolation import tempdirs; tempdirs.sweep()"],
                           env=env, cwd=Path(__file__).resolve().parents[2], check=True, timeout=60)  # fmt: skip
    assert swept.returncode == 0
    assert not list(tmp.glob("musaenv-*")), sorted(d.name for d in tmp.glob("musaenv-*"))


def _busy_worker(pid: int) -> bool:
    from musaenv.isolation.proctree import cpu_seconds

    return "forkserver" in _cmdline(pid) and os.getppid() != pid and (cpu_seconds(pid) or 0.0) > 1.0 and _is_fork(pid)


def _is_fork(pid: int) -> bool:
    """A forked worker (its parent is the fork server), not the server itself."""
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[1])
    except (OSError, IndexError, ValueError):
        return False
    return "forkserver" in _cmdline(ppid)


_BATCH = """
import sys
from musaenv.config import EvalConfig
from musaenv.evaluator.pool import EvaluatorPool
from musaenv.tasks.builtin import get_task
code = open(sys.argv[1]).read()
cfg = EvalConfig(static_policy="off", run_timeout_s=600.0)
with EvaluatorPool("cpu", cfg, compile_workers=1, max_in_flight=2) as pool:
    pool.evaluate_many([(get_task("l1_relu"), code, s) for s in range(4)])
"""


@pytest.mark.parametrize(("how", "sig", "rc"), [("batch", signal.SIGINT, 1), ("cli", signal.SIGTERM, 143)])
def test_interrupt_stops_within_seconds(tmp_path: Path, how: str, sig: int, rc: int) -> None:
    """Ctrl-C stops a pool's batch and SIGTERM the CLI while their candidates spin: both exit within seconds and
    leave nothing running (without the fix the batch waited for 600 s run limits)."""
    tag = uuid.uuid4().hex
    (tmp_path / "cand.py").write_text(_BUSY)
    if how == "batch":
        (tmp_path / "batch.py").write_text(_BATCH)
        cmd = [sys.executable, str(tmp_path / "batch.py"), str(tmp_path / "cand.py")]
    else:
        cmd = [sys.executable, "-m", "musaenv.cli", "eval", "--task", TASK, "--candidate", str(tmp_path / "cand.py"),
               "--policy", "off"]  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "MUSAENV_KILL_TEST": tag, "PYTHONPATH": str(root)}
    # a job started in the background by a non-interactive shell inherits SIGINT ignored: give the default back
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 240
    while not any(_busy_worker(p) for p in _tagged(tag)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(sig)
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped_s = time.monotonic() - t0
    left = _settles(lambda: _tagged(tag))
    described = [(p, _cmdline(p)) for p in left]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, described
    assert proc.returncode == rc if how == "cli" else proc.returncode != 0, (proc.returncode, err[-2000:])
    assert stopped_s < 15, stopped_s


_SLOW = """
import time
import torch
_first = []
class ModelNew(torch.nn.Module):
    def forward(self, x):
        _first.append(_first[0] if _first else time.monotonic())
        if time.monotonic() - _first[0] < 1.5:  # slow trials (a window to stop it in), then a plain timing
            time.sleep(0.2)
        return torch.relu(x)
"""


def test_stopped_worker_is_infra_error(ev: LocalEvaluator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker stopped from outside (SIGSTOP: its CPU and own time stop, wall time goes on) ends at the wall-clock
    backstop as the host's infra_error, never as the candidate's timeout; a retry on a fresh worker is right."""
    from musaenv.isolation import limits

    monkeypatch.setattr(limits, "BACKSTOP_FACTOR", 1.0)
    monkeypatch.setattr(limits, "BACKSTOP_EXTRA_S", 2.0)
    cfg = EvalConfig(num_trials=2, static_policy="off", runtime_checks=False, run_timeout_s=2.0, timing_timeout_s=2.0,
                     timing=TimingConfig(warmup=1, repeats=2, max_time_s=0.3))  # fmt: skip
    with LocalEvaluator("cpu", cfg) as e:
        assert e.evaluate(get_task(TASK), _SLOW, seed=1).stage is Stage.CORRECT
        stopped: list[int] = []

        def stop_active() -> None:
            server = e._server.proc.pid if e._server is not None else -1
            deadline = time.monotonic() + 30
            while not stopped and time.monotonic() < deadline:
                active = [p for p in descendants(server) if p not in _known(e)]
                if active:
                    time.sleep(0.6)  # into its trials (each call sleeps 0.2 s)
                    os.kill(active[0], signal.SIGSTOP)
                    stopped.append(active[0])
                time.sleep(0.01)

        thread = threading.Thread(target=stop_active, daemon=True)
        thread.start()
        t0 = time.monotonic()
        r = e.evaluate(get_task(TASK), _SLOW, seed=2)
        took = time.monotonic() - t0
        thread.join(timeout=5)
        assert stopped, "no worker was stopped"
        assert r.stage is Stage.INFRA_ERROR, r.to_dict()
        assert "backstop" in " ".join(r.messages) + r.runtime_log, r.to_dict()
        assert took < 30, took
        assert not _settles(lambda: [p for p in stopped if _alive(p)])  # the stopped worker was killed
        assert e.evaluate(get_task(TASK), _SLOW, seed=3).stage is Stage.CORRECT
