"""Timing CPUs kept out of halt while timing: the per-CPU request (a keeper process, shared by every holder on the
host, restored by the last one, after crashes too), the global request where per-CPU is refused, nothing at all.

Most tests run on a fake tree (``MUSAENV_AWAKE_ROOT``): cpu0 reads ``0``, cpu1 ``25`` (so a restore of the saved
value is told apart from a write of the default). The tests marked ``real`` write this machine's files (root only).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from musaenv.evaluator import awake
from musaenv.evaluator.awake import awake_cores
from musaenv.evaluator.awake_keeper import latency_file, state_dir

_HOLDER = """
import sys
from musaenv.evaluator.awake import awake_cores
with awake_cores({cpus}) as form:
    print(form, flush=True)
    sys.stdin.read()
"""

Spawn = Callable[[set[int]], "subprocess.Popen[str]"]


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for cpu, value in ((0, "0"), (1, "25")):
        f = Path(latency_file(str(tmp_path), cpu))
        f.parent.mkdir(parents=True)
        f.write_text(value + "\n")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "cpu_dma_latency").write_bytes(b"")
    monkeypatch.setenv("MUSAENV_AWAKE_ROOT", str(tmp_path))
    monkeypatch.delenv("MUSAENV_CORES_AWAKE", raising=False)
    yield tmp_path
    awake.close_parked()  # this tree's parked keepers


def _value(root: Path | str, cpu: int = 1) -> str:
    return Path(latency_file(str(root), cpu)).read_text().strip()


def _saved(root: Path | str, cpu: int = 1) -> Path:
    return Path(state_dir(str(root))) / f"cpu{cpu}.saved"


def _keeper(cpus: set[int]) -> subprocess.Popen[bytes]:
    keeper = awake._holds[frozenset(cpus)].keeper
    assert keeper is not None
    return keeper


def _until(check: Callable[[], bool], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start a holder in a process of its own (it holds until its stdin closes)."""
    procs: list[subprocess.Popen[str]] = []

    def start(cpus: set[int]) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-c", _HOLDER.format(cpus=cpus)]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 60)[0], "the holder said nothing"
        assert proc.stdout.readline().strip() == "cpus"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            _let_go(proc)


def _let_go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(10) == 0


def test_the_first_holder_writes_na_on_its_cpus_alone_and_restores_the_saved_value(tree: Path):
    with awake_cores({1}) as form:
        assert form == "cpus"
        assert _value(tree, 1) == "n/a" and _value(tree, 0) == "0"
        assert _saved(tree).read_text() == "25"
        assert (tree / "dev" / "cpu_dma_latency").read_bytes() == b""  # no global request beside it
        keeper = _keeper({1})
    assert _value(tree) == "25" and not _saved(tree).exists()
    assert keeper.poll() is None and awake._holds == {}  # parked: alive, holding nothing
    awake.close_parked()
    assert keeper.returncode == 0 and awake._parked == {}


def test_the_keeper_is_parked_between_phases_with_its_cpus_restored(tree: Path):
    """One keeper serves phase after phase: held n/a in each block, the saved value back between them."""
    with awake_cores({1}):
        keeper = _keeper({1})
    for _ in range(3):
        assert _value(tree) == "25" and not _saved(tree).exists() and keeper.poll() is None
        with awake_cores({1}) as form:
            assert form == "cpus" and _keeper({1}) is keeper and _value(tree) == "n/a"
    assert _value(tree) == "25"


@pytest.mark.parametrize("how", ["killed", "signalled"])
def test_a_parked_keeper_that_died_is_replaced(tree: Path, how: str):
    with awake_cores({1}):
        keeper = _keeper({1})
    keeper.send_signal(signal.SIGKILL if how == "killed" else signal.SIGTERM)
    keeper.wait(5)
    assert _value(tree) == "25"  # it held nothing: nothing to undo
    with awake_cores({1}) as form:
        assert form == "cpus" and _keeper({1}) is not keeper and _value(tree) == "n/a"
    assert _value(tree) == "25" and not _saved(tree).exists()


def test_a_parked_keeper_exits_with_its_process(tree: Path):
    code = "from musaenv.evaluator import awake\nwith awake.awake_cores({1}):\n"
    code += "    k = awake._holds[frozenset({1})].keeper\n"
    code += "print(k.pid, flush=True)\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL
    pid = int(child.stdout.split()[0])

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    assert _until(gone, 2.0)  # end of file on its stdin
    assert _value(tree) == "25"


def test_holders_in_one_process_share_one_keeper(tree: Path):
    with awake_cores({1}) as outer:
        keeper = _keeper({1})
        with awake_cores({1}) as inner:
            assert outer == inner == "cpus" and _keeper({1}) is keeper and awake._holds[frozenset({1})].count == 2
        assert _value(tree) == "n/a" and keeper.poll() is None  # still held by the outer block
    assert _value(tree) == "25"


@pytest.mark.parametrize("child_leaves_first", [True, False])
def test_holders_in_two_processes_restore_after_the_last(tree: Path, spawn: Spawn, child_leaves_first: bool):
    with contextlib.ExitStack() as stack:
        child = spawn({1})
        assert stack.enter_context(awake_cores({1})) == "cpus"  # joins: must not save the n/a it finds
        first, last = (lambda: _let_go(child), stack.close)
        if not child_leaves_first:
            first, last = last, first
        first()
        assert _value(tree) == "n/a" and _saved(tree).read_text() == "25"
        last()
        assert _value(tree) == "25" and not _saved(tree).exists()


def test_a_saved_value_without_a_holder_is_the_original(tree: Path):
    os.makedirs(state_dir(str(tree)), mode=0o700)
    _saved(tree).write_text("25")  # a keeper killed while it held: its n/a is still there
    Path(latency_file(str(tree), 1)).write_text("n/a\n")
    with awake_cores({1}) as form:
        assert form == "cpus" and _saved(tree).read_text() == "25"
    assert _value(tree) == "25" and not _saved(tree).exists()


def test_a_killed_keeper_is_undone_by_the_next_holder(tree: Path):
    with awake_cores({1}):
        keeper = _keeper({1})
        os.kill(keeper.pid, signal.SIGKILL)
        keeper.wait(10)
    assert _value(tree) == "n/a"  # nothing restored it
    with awake_cores({1}) as form:
        assert form == "cpus"
    assert _value(tree) == "25" and not _saved(tree).exists()


def test_a_killed_holder_leaves_its_keeper_to_restore(tree: Path, spawn: Spawn):
    child = spawn({1})
    assert _value(tree) == "n/a"
    child.kill()
    child.wait(10)
    assert _until(lambda: _value(tree) == "25", 2.0)
    assert _until(lambda: not _saved(tree).exists(), 2.0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_the_keeper_restores_on_a_signal(tree: Path, sig: signal.Signals):
    with awake_cores({1}):
        keeper = _keeper({1})
        keeper.send_signal(sig)
        assert keeper.wait(5) == 0
        assert _value(tree) == "25" and not _saved(tree).exists()


@pytest.mark.parametrize("refusal", ["missing", "keeper refused"])
def test_the_global_request_serves_where_the_cpus_cannot_be_held(tree: Path, refusal: str):
    cpu1 = Path(latency_file(str(tree), 1))
    cpu1.unlink()
    if refusal == "keeper refused":  # writable as far as access() tells, but the keeper cannot read or write it
        cpu1.mkdir()
    with awake_cores({0, 1}) as form:
        assert form == "global"
        assert (tree / "dev" / "cpu_dma_latency").read_bytes() == struct.pack("i", 0)
        assert _value(tree, 0) == "0"  # all or none: cpu0, held before cpu1 was refused, is restored
    assert not _saved(tree, 0).exists() and awake._holds == {}


def test_opting_out_or_nothing_to_hold_holds_nothing(tree: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MUSAENV_CORES_AWAKE", "0")
    with awake_cores({1}) as form:
        assert form is False and _value(tree) == "25"
    assert not Path(state_dir(str(tree))).exists() and (tree / "dev" / "cpu_dma_latency").read_bytes() == b""
    monkeypatch.delenv("MUSAENV_CORES_AWAKE")
    Path(latency_file(str(tree), 1)).unlink()
    (tree / "dev" / "cpu_dma_latency").unlink()
    with awake_cores({1}) as form:  # no root: timed as before, never an error
        assert form is False
    assert awake._holds == {}


def _real_cpu() -> int:
    return max(os.sched_getaffinity(0))


def _real_writable() -> bool:
    return os.geteuid() == 0 and os.access(latency_file("", _real_cpu()), os.W_OK)


@pytest.fixture
def real(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, str]]:
    """This machine's timing CPU and its value, written back whatever the test did."""
    monkeypatch.delenv("MUSAENV_AWAKE_ROOT", raising=False)
    monkeypatch.delenv("MUSAENV_CORES_AWAKE", raising=False)
    cpu = _real_cpu()
    before = _value("", cpu)
    yield cpu, before
    if _value("", cpu) != before:
        Path(latency_file("", cpu)).write_text(before)
        pytest.fail(f"cpu{cpu}'s resume latency was left at n/a")


@pytest.mark.skipif(not _real_writable(), reason="needs write access to pm_qos_resume_latency_us (root)")
def test_real_the_timing_cpu_polls_while_held(real: tuple[int, str]):
    cpu, before = real
    with awake_cores({cpu}) as form:
        assert form == "cpus" and _value("", cpu) == "n/a"
    assert _value("", cpu) == before


@pytest.mark.skipif(not _real_writable(), reason="needs write access to pm_qos_resume_latency_us (root)")
def test_real_a_killed_holder_is_undone_within_2_s(real: tuple[int, str], spawn: Spawn):
    cpu, before = real
    child = spawn({cpu})
    assert _value("", cpu) == "n/a"
    child.kill()
    child.wait(10)
    assert _until(lambda: _value("", cpu) == before, 2.0)


def _target_us() -> int:
    """The kernel's current CPU wake-up latency target (what every open global request adds up to)."""
    fd = os.open("/dev/cpu_dma_latency", os.O_RDONLY)
    try:
        return int(struct.unpack("i", os.read(fd, 4))[0])
    finally:
        os.close(fd)


def _can_request() -> bool:
    try:
        os.close(os.open("/dev/cpu_dma_latency", os.O_WRONLY))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _can_request(), reason="needs write access to /dev/cpu_dma_latency (root)")
def test_real_the_global_request_holds_for_the_block_is_shared_and_released(tmp_path, monkeypatch):
    (tmp_path / "dev").symlink_to("/dev")  # the real device, and no per-CPU files: the global form
    monkeypatch.setenv("MUSAENV_AWAKE_ROOT", str(tmp_path))
    monkeypatch.delenv("MUSAENV_CORES_AWAKE", raising=False)
    before = _target_us()
    with awake_cores({1}) as held:
        assert held == "global" and _target_us() == 0
        with awake_cores({1}) as inner:  # a second evaluation timing at once shares the one request
            assert inner == "global" and awake._holds[frozenset({1})].count == 2
        assert _target_us() == 0  # still held by the outer block
    assert _target_us() == before and awake._holds == {}
