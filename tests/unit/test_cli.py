"""The musaenv command line (fast paths: no compiling)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from musaenv.cli import main


def test_tasks_json_lists_ids_and_levels(capsys: pytest.CaptureFixture[str]):
    assert main(["tasks", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) >= 40 and all({"id", "level"} <= set(r) for r in rows)


def test_eval_of_a_non_code_response_exits_zero_with_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    f = tmp_path / "resp.md"
    f.write_text("I cannot write this kernel.")
    assert main(["eval", "--task", "l1_relu", "--candidate", str(f), "--backend", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stage"] == "format_error" and out["score"] == -1.0


def test_usage_errors_exit_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["eval", "--task", "l1_relu", "--candidate", str(tmp_path / "missing.py")]) == 2
    assert main(["eval", "--task", "no_such_task", "--candidate", str(tmp_path / "missing.py")]) == 2
    assert "error" in capsys.readouterr().err


def test_eval_policy_is_chosen_and_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    f = tmp_path / "resp.md"
    f.write_text("```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                 "        return torch.relu(x)\n```")  # fmt: skip
    args = ["eval", "--task", "l1_relu", "--candidate", str(f), "--backend", "cpu", "--json", "--policy"]
    for policy in ("strict", "kernelbench"):  # no kernel at all: refused statically under both
        assert main([*args, policy]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["stage"] == "cheating" and out["policy"] == policy and "no_custom_kernel" in out["flags"], out
    with pytest.raises(SystemExit):
        main([*args, "nonsense"])


def test_tasks_dir_json_lists_derived_shapes_and_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MUSAENV_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    src = Path(__file__).parents[1] / "data" / "tasks" / "row_offset.py"
    (tmp_path / "kb" / "level1" / "row_offset.py").write_text(src.read_text())
    assert main(["tasks", "--dir", str(tmp_path / "kb"), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert {"id", "level", "dtype", "shapes", "warnings"} <= set(row)
    assert (row["id"], row["level"], row["dtype"], row["warnings"]) == ("level1/row_offset", 1, "float32", [])
    assert len(row["shapes"]["cpu"]) == 2 and row["shapes"]["gpu"][0] == {}
    assert all(isinstance(s, dict) for tier in row["shapes"].values() for s in tier)


UNDERIVABLE_TASK = """import torch
import torch.nn as nn

N = 16


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(N + 1, 3)  # a size mistake: the reference fails at the file's own sizes


def get_inputs():
    return [torch.rand(N, N)]


def get_init_inputs():
    return []
"""


def test_tasks_dir_says_why_a_file_is_not_derived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """A folder's file whose shapes cannot be derived is listed with the reference's error, not the bare flag:
    in the text listing (under the entry) and in the JSON (``notes``)."""
    monkeypatch.setenv("MUSAENV_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "bad_sizes.py").write_text(UNDERIVABLE_TASK)
    assert main(["tasks", "--dir", str(tmp_path / "kb")]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, ln in enumerate(out) if ln.startswith("level1/bad_sizes"))
    assert "[not_derived]" in out[head], out
    why = [ln for ln in out[head + 1 :] if ln.startswith("    why: ")]
    assert why and "does not run at the file's sizes" in why[0] and "RuntimeError" in why[0], out
    assert out[-1].endswith("1 not derived"), out
    assert main(["tasks", "--dir", str(tmp_path / "kb"), "--json"]) == 0  # cached: the note is kept with it
    (row,) = json.loads(capsys.readouterr().out)
    assert row["warnings"] == ["not_derived"] and "RuntimeError" in " ".join(row["notes"]), row


SLOW_TASK = '''import time
import torch
import torch.nn as nn


class Model(nn.Module):
    """A fake task whose reference takes 0.4 s a call: its derivation is slow, as a cold KernelBench file is."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.4)
        return x * 2


def get_inputs():
    return [torch.rand(64, 64)]


def get_init_inputs():
    return []
'''


def test_tasks_dir_off_a_terminal_is_never_silent(tmp_path: Path) -> None:
    """``musaenv tasks --dir`` in a job log (stderr a pipe): while the slow file derives, a progress line comes at
    least every interval (injected: 0.5 s instead of 30 s) with done/total, rate, ETA and the file running now."""
    import subprocess
    import sys
    import threading
    import time

    (tmp_path / "kb" / "level1").mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "slow.py").write_text(SLOW_TASK)
    env = {**os.environ, "MUSAENV_CACHE_DIR": str(tmp_path / "cache"), "MUSAENV_PROGRESS_INTERVAL_S": "0.5"}
    cmd = [sys.executable, "-m", "musaenv.cli", "tasks", "--dir", str(tmp_path / "kb")]
    # stdout to a file: communicate() would read stderr too, racing the timestamping reader for its lines
    with (tmp_path / "stdout.txt").open("w+") as stdout:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)
        seen: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: seen.extend((time.monotonic(), ln) for ln in proc.stderr or []))
        reader.start()
        proc.wait(timeout=300)
        reader.join()
        stdout.seek(0)
        out = stdout.read()
    end = time.monotonic()
    assert proc.returncode == 0 and "level1/slow" in out, (out, seen)
    lines = [(t, ln) for t, ln in seen if "deriving shapes: " in ln]
    assert len(lines) >= 3, seen
    assert all("/1 (" in ln and "ETA " in ln and "/min" in ln for _, ln in lines), lines
    assert any(ln.rstrip().endswith("running: level1/slow") for _, ln in lines[:-1]), lines
    assert "deriving shapes: 1/1 (100%)" in lines[-1][1]
    stamps = [t for t, _ in lines] + [end]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert max(gaps) < 3.0, (gaps, lines)  # 0.5 s apart, with room for a busy machine
