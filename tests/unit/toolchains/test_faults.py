"""The rule that reads a failed build as the machine's: the compilers' own words for a foreign kill, a full disk
and exhausted tables (measured here: gcc 13's driver with cc1plus SIGKILLed, nvcc 13 with cicc SIGKILLed), and
what stays the candidate's."""

from __future__ import annotations

from pathlib import Path

import pytest

from musaenv.isolation.integrity import write_sealed
from musaenv.toolchains import ext_cache
from musaenv.toolchains.faults import FAULT_RULES, confirmed_fault, machine_fault, step_fault


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("g++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.\n", "cc1plus"),
        ("nvcc error   : '\"$CICC_PATH/cicc\"' died due to signal 9 (Kill signal)\n", "CICC_PATH/cicc"),
        ("collect2: fatal error: ld terminated with signal 9 [Killed]\n", "ld"),
        ("c++: fatal error: Terminated signal terminated program cc1plus\n", "Terminated"),
        ("main.o: No space left on device\n", "disk filled"),
        ("g++: fatal error: cannot execute 'cc1plus': vfork: Resource temporarily unavailable\n", "process table"),
        ("x.h: fatal error: Too many open files\n", "file table"),
    ],
)
def test_machine_faults_are_named(text: str, says: str) -> None:
    why = machine_fault(text)
    assert why is not None and says in why, why


@pytest.mark.parametrize(
    "text",
    [
        "main.cpp:3:5: error: 'foo' was not declared in this scope\n",
        'cuda.cu(7): error: identifier "musaenv_undefined_symbol" is undefined\n',
        "cc1plus: out of memory allocating 65536 bytes after a total of 8589934592 bytes\n",  # its own address limit
        "main.cpp:9:1: internal compiler error: Segmentation fault\n",  # raised inside the compiler by that source
        "nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)\n",
    ],
)
def test_the_candidates_own_failures_are_not_faults(text: str) -> None:
    assert machine_fault(text) is None


def test_a_step_killed_by_a_foreign_signal_is_a_fault() -> None:
    assert step_fault([{"name": "cpp", "returncode": -9}]) == "the cpp step was killed from outside (SIGKILL)"
    assert step_fault([{"name": "cpp", "returncode": -11}, {"name": "cuda", "returncode": 1}]) is None
    assert step_fault([{"name": "cuda", "returncode": None}]) is None  # killed by the build service itself
    # nvcc whose cicc (run through sh) the OOM killer took in a 1.5 GB memory cgroup: the shell's "Killed", exit 137.
    assert step_fault([{"name": "cuda", "returncode": 137}]) == "the cuda step was killed from outside (SIGKILL)"
    stopped = {"name": "cpp", "returncode": -9, "note": "stopped: the cuda step failed first"}
    assert step_fault([stopped, {"name": "cuda", "returncode": 1}]) is None  # our own kill of the other step


def test_a_failure_sealed_under_another_rule_is_built_again(tmp_path: Path) -> None:
    root, name = tmp_path / "ext", "musaenv_" + "1" * 24
    ext_cache.seal_failure(root / name, name, "error: x", {"tier": "fast"})
    assert ext_cache.sealed_failure(root, name) == "error: x"
    record = {"name": name, "log": "Killed signal terminated program cc1plus", "epoch": ext_cache.FAILURE_EPOCH}
    write_sealed(root / name / "failed.json", "ext_failed", {**record, "rules": FAULT_RULES - 1})
    assert ext_cache.sealed_failure(root, name) is None  # sealed before this rule: possibly a killed compiler


# A candidate's source prints any line it likes: #error, #pragma message, or a #line file name holding a newline.
_FORGED = (
    'main.cpp:1:2: error: #error "x"\ng++: fatal error: Killed signal terminated program cc1plus\n'
    "compilation terminated.\n"
)


def test_text_alone_never_decides_a_fault() -> None:
    assert machine_fault(_FORGED) is not None  # it reads like one (so it is never sealed) ...
    assert confirmed_fault(_FORGED, [{"name": "cpp", "returncode": 1}], oom_rose=False) is None  # ... but is no fault
    for text in ("main.o: No space left on device\n", "x.h: fatal error: Too many open files\n"):
        assert confirmed_fault(text, [], oom_rose=True) is None  # the builder's own checks decide these


def test_a_kill_is_confirmed_by_the_kernel_or_the_exit_status() -> None:
    why = confirmed_fault(_FORGED, [{"name": "cpp", "returncode": 1}], oom_rose=True)
    assert why is not None and "cc1plus" in why and "OOM killer" in why
    assert confirmed_fault("", [{"name": "cuda", "returncode": 137}], oom_rose=False) is not None
