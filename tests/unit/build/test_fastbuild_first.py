"""A fresh install's first C++ build compiles as load_inline does and leaves the binding objects to the background."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from musaenv.build import fastbuild
from musaenv.build.buildspec import BuildSpec

SOURCE = "#include <torch/extension.h>\ntorch::Tensor twice(torch::Tensor x) { return x * 2; }\n"


def _first_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str) -> tuple[Any, list[str]]:
    seen: dict[str, Any] = {}

    def pch_tier(flags: Any, store: Any, *args: Any) -> fastbuild.FastResult:
        seen["ask_full"] = args[-1] if len(args) == 6 else True
        return fastbuild.FastResult(True, "", "pch", [])

    def split_tier(*args: Any) -> fastbuild.FastResult:
        seen["split"] = True
        return fastbuild.FastResult(True, "", "split", [])

    monkeypatch.setenv("MUSAENV_BACKGROUND_WARMUP", setting)
    monkeypatch.setattr(fastbuild, "_pch_tier", pch_tier)
    monkeypatch.setattr(fastbuild, "_split_tier", split_tier)
    spec = BuildSpec.from_load_inline({"cpp_sources": SOURCE, "functions": ["twice"]}, "cpu")
    res = fastbuild.fast_build({**spec.to_dict(), "name": "musaenv_first"}, "musaenv_first", tmp_path, tmp_path / "pch")
    assert res is not None
    return seen, res.wanted


def test_no_binding_objects_yet_means_load_inlines_unit_and_a_background_build(monkeypatch, tmp_path):
    seen, wanted = _first_build(monkeypatch, tmp_path, "1")
    assert seen == {"ask_full": False}  # torch's main.cpp; no torch/extension.h header wanted for it
    assert wanted == ["bind", "split"]  # the binding objects first, then the split tier's header


def test_without_background_builds_the_split_tier_builds_them_itself(monkeypatch, tmp_path):
    seen, _ = _first_build(monkeypatch, tmp_path, "0")
    assert seen == {"split": True}
