"""The stop scope of a build's compiler processes (:mod:`musaenv.toolchains.stopping`), with real processes."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from musaenv.toolchains.cpp.compiler import run_tool
from musaenv.toolchains.cpp.fastbuild import _Background
from musaenv.toolchains.stopping import STOPPED_RC, StopScope, stoppable

# A driver with a child in its group (gcc and its cc1plus); both pids written to the file named by argv[1].
DRIVER = "import os, subprocess, sys; c = subprocess.Popen(['sleep', '60']); open(sys.argv[1], 'w').write(f'{os.getpid()} {c.pid}'); c.wait()"  # noqa: E501


def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _stop_when_written(scope: StopScope, path: Path) -> threading.Thread:
    def stop() -> None:
        while not (path.exists() and path.read_text()):
            time.sleep(0.02)
        scope.stop("the device compile ended first")

    t = threading.Thread(target=stop)
    t.start()
    return t


def test_outside_a_scope_run_tool_is_unchanged(tmp_path: Path) -> None:
    assert run_tool([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                    tmp_path) == (3, "out\nerr\n")  # fmt: skip


def test_inside_a_scope_run_tool_returns_what_it_would_have(tmp_path: Path) -> None:
    with stoppable(StopScope()):
        rc, out = run_tool([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], tmp_path)
        timed = run_tool(["sleep", "30"], tmp_path, timeout_s=0.5)
    assert (rc, out) == (0, "out\nerr\n")
    assert timed[0] == 124 and "timed out" in timed[1]


def test_stop_kills_the_whole_group_and_later_tools_do_not_start(tmp_path: Path) -> None:
    scope, pids = StopScope(), tmp_path / "pids"
    stopper = _stop_when_written(scope, pids)
    t0 = time.monotonic()
    with stoppable(scope):
        rc, out = run_tool([sys.executable, "-c", DRIVER, str(pids)], tmp_path, timeout_s=120)
        later = run_tool(["touch", str(tmp_path / "never")], tmp_path)
    stopper.join()
    assert rc == STOPPED_RC and "stopped: the device compile ended first" in out and time.monotonic() - t0 < 30
    assert all(_gone(int(p)) for p in pids.read_text().split())  # the driver and its child
    assert later[0] == STOPPED_RC and not (tmp_path / "never").exists()


def test_a_background_job_of_the_build_is_stopped_with_it(tmp_path: Path) -> None:
    scope, pids = StopScope(), tmp_path / "pids"
    stopper = _stop_when_written(scope, pids)
    with stoppable(scope):
        job = _Background(lambda: run_tool([sys.executable, "-c", DRIVER, str(pids)], tmp_path, timeout_s=120))
    rc, _ = job.wait()
    stopper.join()
    assert rc == STOPPED_RC and all(_gone(int(p)) for p in pids.read_text().split())


def test_a_tool_that_ended_is_not_the_scopes_any_more(tmp_path: Path) -> None:
    scope = StopScope()
    with stoppable(scope):
        assert run_tool(["true"], tmp_path) == (0, "")
    assert not scope._groups  # stop() kills no pid that a finished tool had
