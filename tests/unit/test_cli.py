"""The musaenv command line (fast paths: no compiling)."""

from __future__ import annotations

import json
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
