"""The build sandbox, measured from outside: what a build process can and cannot do, and what survives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# The build function runs in a fresh interpreter (like the builder): it tries what a hostile compiler driver
# would, records each outcome in the private build dir, and leaves a daemon behind.
_SCRIPT = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys, time
    from pathlib import Path
    from musaenv.isolation.build_jail import run_confined

    tmp, outside, pidfile = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

    def attempt(fn):
        try:
            fn()
            return "allowed"
        except OSError as e:
            return type(e).__name__

    def build(report):
        out = {"report": report}
        out["write_outside"] = attempt(lambda: (outside / "planted.pth").write_text("import os"))
        out["write_inside"] = attempt(lambda: (tmp / "ok.txt").write_text("fine"))
        out["inet_socket"] = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
        out["exec"] = subprocess.run(["/bin/true"]).returncode
        # a daemon: double fork, setsid, outlive the build by a minute
        subprocess.Popen([sys.executable, "-c",
            "import os,sys,time\\nif os.fork(): sys.exit(0)\\nos.setsid()\\n"
            f"open({str(tmp / 'daemon.pid')!r},'w').write(str(os.getpid()))\\n"
            "time.sleep(60)"], start_new_session=True).wait()
        deadline = time.time() + 5
        while not (tmp / "daemon.pid").exists() and time.time() < deadline:
            time.sleep(0.05)
        (tmp / "out.json").write_text(json.dumps(out))
        return 0

    code = run_confined(build, tmp, parent_pid=os.getppid(), writable=[], cpu_s=30)
    print(json.dumps({"code": code}))
    """
)


def _outer_pid_of_daemon(tmp: Path) -> int | None:
    # The daemon wrote its pid as seen in its namespace; find it from outside by its command line instead.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"time.sleep(60)" in cmd and str(tmp).encode() in cmd:
                return int(entry.name)
    return None


@pytest.mark.skipif(sys.platform != "linux", reason="Linux sandbox")
def test_build_writes_only_its_dir_has_no_network_and_leaves_nothing_alive(tmp_path: Path) -> None:
    build_dir, outside = tmp_path / "build", tmp_path / "site-packages"
    build_dir.mkdir()
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(build_dir), str(outside), str(tmp_path / "pid")],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["code"] == 0
    out = json.loads((build_dir / "out.json").read_text())
    applied = out["report"]["sandbox"]["applied"]
    if "landlock_writes" in applied:
        assert out["write_outside"] == "PermissionError"
        assert not (outside / "planted.pth").exists()
    assert out["write_inside"] == "allowed"
    if "seccomp_network" in applied:
        assert out["inet_socket"] == "PermissionError"
    assert out["exec"] == 0  # compilers run programs: exec stays allowed
    assert (build_dir / "daemon.pid").exists()  # the daemon did start inside the build
    time.sleep(0.5)
    assert _outer_pid_of_daemon(build_dir) is None, "a process the build started outlived it"


_SLOW_BUILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from musaenv.toolchains.loader import BuildSpec, build_extension
    # torch's own load_inline path: parsing torch/extension.h keeps cc1plus busy for ~30 s
    src = "long f() { return 1; }\\n// " + sys.argv[2] + "\\n"
    spec = BuildSpec.from_load_inline({"cpp_sources": src, "functions": ["f"]}, "cpu")
    print("building", flush=True)
    build_extension(spec, timeout_s=600, root=Path(sys.argv[1]), mode="torch")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="Linux process model")
def test_killing_the_evaluator_kills_its_build(tmp_path: Path) -> None:
    from musaenv.isolation.proctree import descendants

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_BUILD, str(tmp_path), os.urandom(8).hex()],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "building"
    deadline = time.time() + 120
    tree: list[int] = []
    while time.time() < deadline and not any(_is_compiler(p) for p in tree):
        time.sleep(0.2)
        tree = descendants(proc.pid)
    assert any(_is_compiler(p) for p in tree), "no compiler started"
    proc.kill()
    proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and [p for p in tree if _alive(p)]:
        time.sleep(0.2)
    assert [p for p in tree if _alive(p)] == [], "the build outlived the evaluator that started it"


def _is_compiler(pid: int) -> bool:
    try:
        return b"cc1plus" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


_PIDS_SCRIPT = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from pathlib import Path
    from musaenv.isolation.build_jail import run_confined
    from musaenv.isolation.limits import tree_cpu_seconds

    tmp = Path(sys.argv[1])

    def build(report):
        children = [subprocess.Popen(["sleep", "0.3"]) for _ in range(3)]
        deadline = time.monotonic() + 5  # until each child has exec'd (before that it is a forked python)
        while any(Path(f"/proc/{p.pid}/comm").read_text().strip() != "sleep" for p in children):
            if time.monotonic() > deadline:
                break
        seen = [(Path(f"/proc/{p.pid}/comm").read_text().strip(), tree_cpu_seconds(p.pid)) for p in children]
        for p in children:
            p.wait()
        (tmp / "out.json").write_text(json.dumps({"report": report, "seen": seen}))
        return 0

    sys.exit(run_confined(build, tmp, parent_pid=0, writable=[], cpu_s=30))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="Linux sandbox")
def test_a_builds_children_read_as_themselves_in_proc(tmp_path: Path) -> None:
    # In a pid namespace the build's first child is pid 2; read through the host's /proc that is kthreadd, whose
    # tree holds every kernel thread's CPU time, and a compile step was killed as over its CPU seconds at 0.3 s.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run([sys.executable, "-c", _PIDS_SCRIPT, str(tmp_path)], env=env, timeout=60,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    if out["report"].get("own_proc_reason"):
        pytest.xfail(f"a pid namespace without its own /proc here: {out['report']['own_proc_reason']}")
    assert [comm for comm, _ in out["seen"]] == ["sleep"] * 3
    assert all(cpu is not None and cpu < 5 for _, cpu in out["seen"])
