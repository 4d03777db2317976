"""The worker sandbox and the process-tree helpers.

Every sandbox test runs a fresh interpreter (the sandbox is irreversible) that imports torch, enters the sandbox the
way the worker does, probes it and prints one JSON line. Both implementations are exercised: the C++ helper
(skipped when it is not built) and the ctypes fallback, selected through ``MUSAENV_SANDBOX_IMPL``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import musaenv
from musaenv._env import child_env
from musaenv.config import SandboxConfig
from musaenv.errors import ConfigError
from musaenv.isolation.proctree import descendants, kill_tree, open_inet_sockets, thread_count
from musaenv.isolation.sandbox import SandboxReport, enter_sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

HAS_EXTENSION = importlib.util.find_spec("musaenv._guard") is not None
IMPLEMENTATIONS = [
    pytest.param(
        "extension",
        marks=pytest.mark.skipif(not HAS_EXTENSION, reason="musaenv._guard not built (setup.py build_ext --inplace)"),
    ),
    "python",
]
ADDRESS_SPACE_MB = 4096
REPO_ROOT = Path(musaenv.__file__).resolve().parents[1]

PROBE = r"""
import json, os, socket, subprocess, sys, threading
from pathlib import Path
try:
    import torch
except ImportError:
    torch = None
workdir, outside = Path(sys.argv[1]), Path(sys.argv[2])

def attempt(fn):
    try:
        fn()
        return "ok"
    except BaseException as e:
        return type(e).__name__

# A thread that exists before the sandbox, like the OpenBLAS pool that `import torch` starts.
go, early = threading.Event(), {}
def early_writer():
    go.wait()
    early["write"] = attempt(lambda: (outside / "early.txt").write_text("x"))
early_thread = threading.Thread(target=early_writer)
early_thread.start()

from musaenv._env import child_env
from musaenv.config import SandboxConfig
from musaenv.isolation.sandbox import enter_sandbox
report = enter_sandbox(SandboxConfig(address_space_mb=ADDRESS_SPACE_MB, cpu_time_s=300), workdir)
out = {"report": report.to_dict(), "cwd": os.getcwd()}
out["inet"] = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9)))
out["inet6"] = attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
out["netlink"] = attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))
out["unix"] = attempt(lambda: socket.socketpair(socket.AF_UNIX))

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
out["fork"] = attempt(fork)
out["subprocess"] = attempt(lambda: subprocess.run(["true"], check=True))
box = []
def start_thread():
    t = threading.Thread(target=lambda: box.append(1))
    t.start()
    t.join()
    assert box == [1]
out["thread"] = attempt(start_thread)
def matmul():
    torch.set_num_threads(2)
    a = torch.randn(1000, 1000)
    assert torch.isfinite(a @ a).all()
out["torch"] = attempt(matmul) if torch is not None else "no torch"
out["write_inside"] = attempt(lambda: Path("inside.txt").write_text("x"))
out["write_outside"] = attempt(lambda: (outside / "outside.txt").write_text("x"))
go.set()
early_thread.join()
out["early_thread_write"] = early["write"]
out["signal_parent"] = attempt(lambda: os.kill(os.getppid(), 0))
out["chmod_outside"] = attempt(lambda: os.chmod(outside, 0o777))
import resource
out["getrlimit"] = attempt(lambda: resource.getrlimit(resource.RLIMIT_NOFILE))
out["setrlimit"] = attempt(lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
out["memory_hog"] = attempt(lambda: bytearray(2 * ADDRESS_SPACE_MB << 20))
print(json.dumps(out))
""".replace("ADDRESS_SPACE_MB", str(ADDRESS_SPACE_MB))


def _run_python(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter that imports this checkout of musaenv; returns its last JSON line."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
    )
    assert proc.returncode == 0, f"probe died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def probe(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp(f"sandbox_{request.param}")
    outside = base / "outside"
    outside.mkdir()
    out = _run_python(PROBE, str(base / "work"), str(outside), env={"MUSAENV_SANDBOX_IMPL": request.param})
    out["impl"] = request.param
    out["workdir"] = str((base / "work").resolve())
    return out


KERNEL_HAS_SECCOMP = "Seccomp:" in Path("/proc/self/status").read_text()
MIN_LANDLOCK_ABI = {"landlock_writes": 1, "landlock_tcp": 4, "landlock_scope": 6}


def _require(report: dict[str, Any], measure: str) -> None:
    """Skip when this kernel lacks the feature; fail when it has it and the sandbox did not apply it."""
    if measure.startswith("seccomp") and not KERNEL_HAS_SECCOMP:
        pytest.skip("kernel without seccomp")
    if report["landlock_abi"] < MIN_LANDLOCK_ABI.get(measure, 0):
        pytest.skip(f"{measure} needs Landlock ABI {MIN_LANDLOCK_ABI[measure]}, kernel has {report['landlock_abi']}")
    assert measure in report["applied"], report["not_applied"].get(measure, "not attempted")


def test_report_names_the_implementation_and_round_trips(probe: dict[str, Any]) -> None:
    report = probe["report"]
    assert report["implementation"] == probe["impl"]
    assert SandboxReport.from_dict(report).to_dict() == report
    assert probe["cwd"] == probe["workdir"]


def test_network_sockets_are_denied_but_unix_sockets_work(probe: dict[str, Any]) -> None:
    _require(probe["report"], "seccomp_network")
    assert probe["inet"] == "PermissionError"
    assert probe["inet6"] == "PermissionError"
    assert probe["netlink"] == "PermissionError"
    assert probe["unix"] == "ok"


def test_processes_cannot_be_started_but_threads_and_torch_work(probe: dict[str, Any]) -> None:
    _require(probe["report"], "seccomp_processes")
    assert probe["fork"] == "PermissionError"
    assert probe["subprocess"] == "PermissionError"
    assert probe["thread"] == "ok"
    if probe["torch"] == "no torch":
        pytest.skip("torch not installed")
    assert probe["torch"] == "ok"


def test_writes_are_confined_to_the_workdir(probe: dict[str, Any]) -> None:
    assert probe["write_inside"] == "ok"
    _require(probe["report"], "landlock_writes")
    assert probe["write_outside"] == "PermissionError"


def test_admin_calls_are_denied_but_reading_limits_works(probe: dict[str, Any]) -> None:
    _require(probe["report"], "seccomp_admin")
    assert probe["chmod_outside"] == "PermissionError"
    assert probe["setrlimit"] == "ValueError"  # CPython turns EPERM from setrlimit into ValueError
    assert probe["getrlimit"] == "ok"


def test_threads_started_before_the_sandbox_are_confined_or_reported(probe: dict[str, Any]) -> None:
    report = probe["report"]
    _require(report, "landlock_writes")
    if probe["impl"] == "extension":
        assert probe["early_thread_write"] == "PermissionError"
        assert report["threads_uncovered"] == 0
    else:  # the ctypes fallback cannot reach other threads; the report must say so
        assert report["threads_uncovered"] >= 1


def test_signals_to_processes_outside_the_sandbox_are_denied(probe: dict[str, Any]) -> None:
    _require(probe["report"], "landlock_scope")
    assert probe["signal_parent"] == "PermissionError"


def test_memory_hog_gets_memory_error_and_the_worker_survives(probe: dict[str, Any]) -> None:
    _require(probe["report"], "rlimit_as")
    assert probe["memory_hog"] == "MemoryError"


@pytest.mark.skipif(not HAS_EXTENSION, reason="musaenv._guard not built")
def test_the_extension_loads_the_python_program_and_refuses_a_malformed_one() -> None:
    """One assembler (seccomp.py): the extension loads its bytes; a length that is no program is refused first."""
    guard = importlib.import_module("musaenv._guard")
    for bad in (b"", b"\0" * 12, b"\0" * 8 * 4097):
        with pytest.raises(OSError, match="seccomp program is 1 to 4096 instructions"):
            guard.install_seccomp_program(bad)
    code = (
        "import errno, socket\n"
        "from musaenv import _guard\n"
        "from musaenv.isolation.seccomp import seccomp_program\n"
        "_guard.install_seccomp_program(seccomp_program(True, False, False, True))\n"
        "socket.socket(socket.AF_UNIX).close()\n"
        "try:\n"
        "    socket.socket(socket.AF_INET)\n"
        "except PermissionError:\n"
        "    print('denied')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env())
    assert out.stdout.strip() == "denied", out.stderr


def test_processes_can_be_allowed_while_the_network_stays_blocked(tmp_path: Path) -> None:
    code = (
        "import json, socket, subprocess, sys\nfrom pathlib import Path\n"
        "from musaenv.config import SandboxConfig\nfrom musaenv.isolation.sandbox import enter_sandbox\n"
        "r = enter_sandbox(SandboxConfig(), Path(sys.argv[1]), block_processes=False, block_exec=False)\n"
        "rc = subprocess.run(['true']).returncode\n"
        "try:\n    socket.socket(socket.AF_INET)\n    net = 'ok'\nexcept OSError as e:\n    net = type(e).__name__\n"
        "print(json.dumps({'report': r.to_dict(), 'rc': rc, 'net': net}))\n"
    )
    out = _run_python(code, str(tmp_path / "work"))
    _require(out["report"], "seccomp_network")
    assert out["rc"] == 0
    assert out["net"] == "PermissionError"


def test_network_namespace_fallback_leaves_no_route(tmp_path: Path) -> None:
    code = (
        "import errno, json, socket\nfrom musaenv.isolation.sandbox import isolate_network_namespace\n"
        "try:\n    isolate_network_namespace()\nexcept OSError as e:\n"
        "    print(json.dumps({'skip': str(e)}))\n    raise SystemExit(0)\n"
        "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=5)\n    res = 'connected'\n"
        "except OSError as e:\n    res = errno.errorcode.get(e.errno, str(e))\n"
        "print(json.dumps({'connect': res}))\n"
    )
    out = _run_python(code)
    if "skip" in out:
        pytest.skip(f"no network namespace for this user: {out['skip']}")
    assert out["connect"] == "ENETUNREACH"


def test_unknown_implementation_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        enter_sandbox(SandboxConfig(), tmp_path, implementation="seatbelt")


def _dead(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def test_kill_tree_kills_a_grandchild_that_called_setsid() -> None:
    code = (
        "import subprocess, sys, time\n"
        "gc = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print(gc.pid, flush=True)\ntime.sleep(300)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert grandchild in descendants(child.pid)
        killed = kill_tree(child.pid)
        assert child.wait(timeout=30) < 0
        assert {child.pid, grandchild} <= set(killed)
        assert _dead(grandchild)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_open_inet_sockets_counts_only_network_sockets() -> None:
    before = open_inet_sockets(os.getpid())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, socket.socket(socket.AF_UNIX) as u:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert u.fileno() >= 0
        assert open_inet_sockets(os.getpid()) == before + 1
    assert open_inet_sockets(os.getpid()) == before


def test_thread_count_sees_a_new_thread() -> None:
    import threading

    release = threading.Event()
    before = thread_count()
    t = threading.Thread(target=release.wait)
    t.start()
    try:
        assert thread_count() == before + 1
    finally:
        release.set()
        t.join()


DEFAULT_DIRS_PROBE = r"""
import json, os, sys
from pathlib import Path
from musaenv.config import SandboxConfig
from musaenv.isolation.sandbox import enter_sandbox
workdir, key = Path(sys.argv[1]), Path(sys.argv[2])
report = enter_sandbox(SandboxConfig(cpu_time_s=60), workdir)
out = {"applied": report.to_dict()["applied"]}
(workdir / "own.txt").write_text("x")
out["own_file"] = (workdir / "own.txt").read_text()
try:
    key.read_bytes()
    out["key"] = "read"
except OSError as e:
    out["key"] = type(e).__name__
print(json.dumps(out))
"""


def test_default_key_dir_is_hidden_and_the_workdir_stays_readable(tmp_path: Path) -> None:
    # MUSAENV_CACHE_DIR unset (the default): the key lives in ~/.cache/musaenv.keys. The sandbox moves HOME to the
    # workdir; the dirs it hides must be the ones that held before (a regression: it hid <workdir>/.cache/... ,
    # left the real key readable and took the workdir's own read rights, so a builder could not open its files).
    home = tmp_path / "home"
    key = home / ".cache" / "musaenv.keys" / "key"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k" * 32)
    env = {k: v for k, v in os.environ.items() if k not in ("MUSAENV_CACHE_DIR", "MUSAENV_KEY_DIR", "XDG_CACHE_HOME")}
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", DEFAULT_DIRS_PROBE, str(tmp_path / "work"), str(key)],
        capture_output=True, text=True, timeout=120, env={**env, "HOME": str(home), "PYTHONPATH": path},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "landlock_hide_key" not in out["applied"]:
        pytest.skip("Landlock unavailable: the key is not hidden here")
    assert out["own_file"] == "x"
    assert out["key"] == "PermissionError"
