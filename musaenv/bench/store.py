"""A run folder: ``results.jsonl`` (one line per sample, appended as results come) and ``run.json`` (its options).

Lines are appended and flushed one by one, so a run that is killed loses at most the line being written; a
resumed run drops that partial line, keeps every complete one byte for byte, and evaluates only what is missing.
``infra_error`` rows (the harness failed, not the candidate) are not final: a resumed run evaluates them again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from musaenv.errors import MusaEnvError

__all__ = ["RESULTS_FILE", "RUN_FILE", "ResultStore", "row_key"]

log = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"


def row_key(row: dict[str, Any]) -> tuple[str, int]:
    """``(task, sample)`` of a result row."""
    return (str(row["task"]), int(row["sample"]))


def _is_final(row: dict[str, Any]) -> bool:
    return (row.get("result") or {}).get("stage") != "infra_error"


class ResultStore:
    """The rows of one run folder.

    Args:
        out_dir: The run folder (created if missing).
    """

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.path = self.dir / RESULTS_FILE
        self._lock = threading.Lock()

    def rows(self) -> list[dict[str, Any]]:
        """Every complete row, one per (task, sample): the last one written wins."""
        return [row for row, _ in self._read().values()]

    def _read(self) -> dict[tuple[str, int], tuple[dict[str, Any], str]]:
        """(task, sample) -> (row, its line as written), in file order of each key's last line."""
        found: dict[tuple[str, int], tuple[dict[str, Any], str]] = {}
        if not self.path.exists():
            return found
        with self.path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                try:
                    row = json.loads(line) if line.endswith("\n") else None
                    key = row_key(row) if isinstance(row, dict) else None
                except (ValueError, KeyError, TypeError):
                    key = None
                if key is None or row is None:
                    log.warning("%s:%d: not a complete result row (an interrupted write?); ignored", self.path, lineno)
                    continue
                found.pop(key, None)
                found[key] = (row, line)
        return found

    def open(self, run_record: dict[str, Any], resume: bool) -> dict[tuple[str, int], dict[str, Any]]:
        """Prepare the folder; returns the final rows already there (empty unless ``resume``).

        Raises:
            MusaEnvError: results are there but ``resume`` is off, or they were made with other options.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        has_rows = self.path.exists() and self.path.stat().st_size > 0
        if has_rows and not resume:
            raise MusaEnvError(
                f"{self.path} already holds results; pass --resume to continue that run, or choose another --out"
            )
        self._check_record(run_record, check=has_rows)
        if not has_rows:
            self.path.write_text("")
            return {}
        found = self._read()
        final = {k: row for k, (row, _) in found.items() if _is_final(row)}
        kept = [line for k, (_, line) in found.items() if k in final]
        # One line per final sample: cut-off lines, superseded rows and infra_error rows (evaluated again) go.
        with self.path.open(encoding="utf-8") as f:
            if len(kept) != sum(1 for _ in f):
                self._rewrite(kept)
        return final

    def _check_record(self, record: dict[str, Any], check: bool) -> None:
        path = self.dir / RUN_FILE
        if check and path.exists():
            try:
                old = json.loads(path.read_text())
            except ValueError:
                old = None
            if isinstance(old, dict):
                differ = sorted(k for k in set(old) | set(record) if old.get(k) != record.get(k))
                if differ:
                    raise MusaEnvError(
                        f"{self.dir} holds a run made with other options ({', '.join(differ)} differ; see {path}); "
                        "resume it with the same options, or choose another --out"
                    )
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    def _rewrite(self, lines: list[str]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text("".join(lines), encoding="utf-8")
        os.replace(tmp, self.path)

    def append(self, row: dict[str, Any]) -> None:
        """Write one row and flush it (thread-safe)."""
        line = json.dumps(row, sort_keys=False, allow_nan=False) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
