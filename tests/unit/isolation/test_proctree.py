"""proctree.descendants: the same tree from the kernel's per-thread children lists and from one pass over /proc,
as psutil sees it (a child that left its session and a grandchild started by a second thread included)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from musaenv.isolation import proctree

# A child that starts a grandchild from a second thread, and one that calls setsid; all sleep until killed.
_TREE = r"""
import os, subprocess, sys, threading, time
kids = []
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
t = threading.Thread(target=lambda: kids.append(subprocess.Popen(sleeper)))
t.start(); t.join()
kids.append(subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(60)"]))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree() -> object:
    root = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None and root.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 10
    while len(psutil.Process(root.pid).children(recursive=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield root
    proctree.kill_tree(root.pid)
    root.wait(timeout=10)


def _psutil_view(pid: int) -> list[int]:
    return sorted(c.pid for c in psutil.Process(pid).children(recursive=True))


@pytest.mark.parametrize("lists", [False, True])
def test_descendants_match_psutil(tree: subprocess.Popen[str], lists: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if lists and not proctree._HAS_CHILDREN_LISTS:
        pytest.skip("this kernel keeps no per-thread children lists (CONFIG_PROC_CHILDREN)")
    monkeypatch.setattr(proctree, "_HAS_CHILDREN_LISTS", lists)
    found = proctree.descendants(tree.pid)
    assert len(found) == 2
    assert found == _psutil_view(tree.pid)
    assert proctree.descendants(found[0]) == []


@pytest.mark.parametrize("lists", [False, True])
def test_descendants_of_a_gone_process(lists: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if lists and not proctree._HAS_CHILDREN_LISTS:
        pytest.skip("this kernel keeps no per-thread children lists (CONFIG_PROC_CHILDREN)")
    monkeypatch.setattr(proctree, "_HAS_CHILDREN_LISTS", lists)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert proctree.descendants(gone.pid) == []
