"""Background header builds queue the common flag sets once per process; builders start without the env package."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from musaenv import _env
from musaenv.toolchains import admission, builder, builder_launch, warmup


def _roomy_slots(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Background admission on slots of our own with memory to spare (not this host's state)."""
    monkeypatch.setattr(warmup, "try_admit", partial(admission.try_admit, available=lambda: 1e6, root=root))


def test_background_items_put_the_builds_own_headers_first() -> None:
    spec = {"extra_cflags": ["-O3", "-mavx2"], "extra_include_paths": []}
    own = warmup.background_items(["split"], spec, common=False)
    assert own == [{"kind": "split", "extra_cflags": ["-O3", "-mavx2"], "extra_include_paths": []}]
    both = warmup.background_items(["split"], spec, common=True)
    assert both[0] == own[0]
    assert {tuple(i["extra_cflags"]) for i in both[1:] if i["kind"] == "split"} == set(warmup.COMMON_FLAG_SETS)
    assert all(i["kind"] in ("split", "bind") for i in both)  # no extension headers in the background
    assert warmup.background_items([], spec, common=True) == []


@pytest.mark.parametrize(("setting", "common"), [("1", True), ("wanted", False)])
def test_start_background_queues_common_sets_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str, common: bool
) -> None:
    _roomy_slots(monkeypatch, tmp_path)
    spawned: list[list[dict[str, Any]]] = []

    class Done:
        def poll(self) -> int:
            return 0

        def wait(self) -> int:  # the reaper thread waits on it
            return 0

    def fake_spawn(items: list[dict[str, Any]], timeout_s: float, background: bool) -> tuple[Done, Path]:
        assert background
        spawned.append(list(items))
        return Done(), Path("/nonexistent")

    monkeypatch.setenv("MUSAENV_BACKGROUND_WARMUP", setting)
    monkeypatch.setattr(warmup, "_spawn", fake_spawn)
    monkeypatch.setattr(warmup, "_BG_PROCS", [])
    monkeypatch.setattr(warmup, "_BG_SEEN", set())
    monkeypatch.setattr(warmup, "_COMMON_QUEUED", False)
    warmup.start_background(["split"], {"extra_cflags": ["-O3", "-mavx2"]})
    warmup.start_background(["split"], {"extra_cflags": ["-O2", "-mavx512f"]})
    assert len(spawned) == 2
    assert (len(spawned[0]) > 1) is common  # the first builder goes on with the common sets...
    assert len(spawned[1]) == 1  # ...the next ones do not


def test_launch_leaves_the_env_registration_out() -> None:
    probe = (
        builder_launch._LAUNCH + "import sys\nprint(sorted(m for m in ('gymnasium', 'numpy') if m in sys.modules))\n"
    )
    pkg = str(Path(_env.__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", probe, pkg, "musaenv._env"], capture_output=True, text=True,
                         check=True, env=_env.child_env())  # fmt: skip
    assert out.stdout.strip() == "[]"


def test_builder_command_runs_the_builder(tmp_path: Path) -> None:
    # A malformed warm-up job: the builder's main, its confinement and its report run; the job is refused at once
    # (before anything imports torch), as the harness's failure, not the sources'.
    (tmp_path / "spec.json").write_text(json.dumps({"warmup": "x", "pch_cache": str(tmp_path / "pch")}))
    cmd = builder_launch.builder_command(tmp_path)
    assert builder.__name__ == builder_launch.BUILDER_MODULE  # the launch line names the real module
    assert "musaenv.toolchains.builder" in " ".join(cmd)  # what interrupt.kill_running looks for
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env.child_env(), timeout=120, capture_output=True, text=True)
    result = json.loads((tmp_path / "result.json").read_text())
    assert proc.returncode == 1 and not result["ok"] and result["infra"] and "refused its job" in result["log"]
    assert "confinement" in result


def test_a_bind_item_also_computes_the_names_only_torch_extension_h_declares(tmp_path: Path, monkeypatch) -> None:
    # The first compile error naming an undeclared identifier reads them instead of computing them (~2 s) while
    # its verdict waits. The binding objects themselves (~15 s of CPU) are stood in for here.
    from musaenv.toolchains.cpp import bindobj
    from musaenv.toolchains.cpp.compiler import torch_flags

    monkeypatch.setattr(bindobj, "module_object", lambda flags, cache, steps: tmp_path / "module.o")
    cache = tmp_path / "pch"
    rows = warmup.run_items([{"kind": "bind", "extra_cflags": ["-O3"]}], cache)
    assert rows[0]["ok"], rows
    flags = torch_flags(cache, "musaenv_warmup", ["-O3"], [], [])
    names = json.loads((cache / f"extension_only_names-{flags.bind_key()}.json").read_text())
    assert "PYBIND11_MODULE" in names  # pybind11 is among the headers only torch/extension.h brings
    assert not [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("tmp")]  # its scratch dir is gone


def test_background_build_gives_way_when_memory_is_short(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Short of memory, no background header build starts (not even alone), and the same headers are asked for
    again by a later build once memory is back; the slot it then holds is given back when it ends."""
    spawned: list[Any] = []

    def fake_spawn(items: list[dict[str, Any]], timeout_s: float, background: bool) -> tuple[Any, Path]:
        spawned.append(subprocess.Popen(["sleep", "0.5"]))
        return spawned[-1], tmp_path / "spec"

    memory = [100.0]  # MB available: below a C++ unit's need
    monkeypatch.setattr(warmup, "try_admit", partial(admission.try_admit, available=lambda: memory[0], root=tmp_path))
    monkeypatch.setenv("MUSAENV_BACKGROUND_WARMUP", "wanted")
    monkeypatch.setattr(warmup, "_spawn", fake_spawn)
    monkeypatch.setattr(warmup, "_BG_PROCS", [])
    monkeypatch.setattr(warmup, "_BG_SEEN", set())
    warmup.start_background(["split"], {"extra_cflags": ["-O3"]})
    assert spawned == []
    memory[0] = 1e6
    warmup.start_background(["split"], {"extra_cflags": ["-O3"]})
    assert len(spawned) == 1
    n = admission.slot_count(admission.NEED_MB["cxx"])
    held = [admission._try_lock(tmp_path / f"slot-{i}.lock") for i in range(n)]
    assert held.count(None) == 1  # the background build holds one build slot while it runs
    for fd in held:
        admission.release(fd)
    warmup.wait_background(10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # its reaper gives the slot back
        fds = [admission._try_lock(tmp_path / f"slot-{i}.lock") for i in range(n)]
        for fd in fds:
            admission.release(fd)
        if None not in fds:
            break
        time.sleep(0.05)
    assert None not in fds
