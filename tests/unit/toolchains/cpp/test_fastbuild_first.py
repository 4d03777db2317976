"""A fresh install's first C++ build goes through the split tier, its binding objects compiled beside its unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.cpp import fastbuild

SOURCE = "#include <torch/extension.h>\ntorch::Tensor twice(torch::Tensor x) { return x * 2; }\n"


@pytest.mark.parametrize("setting", ["1", "0", "wanted"])
def test_no_binding_objects_yet_still_means_the_split_tier(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str
) -> None:
    # Measured on 2 cores: the objects on a thread beside the header-less unit took 22.5 s of wall and 32.8 s of
    # CPU against load_inline's 32 s and 34 s; torch's main.cpp instead cost load_inline's time and left ~40 s of
    # CPU of objects to the background.
    seen: dict[str, Any] = {}

    def pch_tier(*args: Any) -> fastbuild.FastResult:
        seen["pch"] = True
        return fastbuild.FastResult(True, "", "pch", [])

    def split_tier(*args: Any) -> fastbuild.FastResult:
        seen["split"] = True
        return fastbuild.FastResult(True, "", "split", [])

    monkeypatch.setenv("MUSAENV_BACKGROUND_WARMUP", setting)
    monkeypatch.setattr(fastbuild, "_pch_tier", pch_tier)
    monkeypatch.setattr(fastbuild, "_split_tier", split_tier)
    spec = BuildSpec.from_load_inline({"cpp_sources": SOURCE, "functions": ["twice"]}, "cpu")
    res = fastbuild.fast_build({**spec.to_dict(), "name": "musaenv_first"}, "musaenv_first", tmp_path, tmp_path / "pch")
    assert res is not None and res.tier == "split"
    assert seen == {"split": True}
