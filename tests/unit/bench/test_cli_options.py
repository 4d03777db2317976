"""``musaenv bench`` option parsing: every EVAL_OPTIONS flag lands in the EvalConfig field it names."""

from __future__ import annotations

import argparse

import pytest

from musaenv.bench.cli import EVAL_OPTIONS, EvalOption, add_eval_options, eval_config_from_args
from musaenv.config import EvalConfig


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_eval_options(p)
    return p.parse_args(argv)


def test_defaults_are_the_config_defaults() -> None:
    assert eval_config_from_args(_parse([])) == EvalConfig()


def test_flags_set_their_fields_nested_ones_included() -> None:
    args = _parse(["--tier", "cpu", "--trials", "2", "--baseline", "compile", "--timeout", "7", "--backend", "cpu"])
    cfg = eval_config_from_args(args)
    assert (cfg.tier, cfg.num_trials, cfg.timing.baseline) == ("cpu", 2, "compile")
    assert cfg.run_timeout_s == 7.0 and cfg.timing_timeout_s == 7.0
    assert cfg.compile_timeout_s == EvalConfig().compile_timeout_s and args.backend == "cpu"


def test_a_new_option_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    row = EvalOption("--atol", ("atol",), {"type": float, "default": None})
    monkeypatch.setattr("musaenv.bench.cli.EVAL_OPTIONS", (*EVAL_OPTIONS, row))
    assert eval_config_from_args(_parse(["--atol", "0.5"])).atol == 0.5


def test_policy_and_reproducible_plans() -> None:
    cfg = eval_config_from_args(_parse(["--policy", "kernelbench", "--reproducible"]))
    assert cfg.static_policy == "kernelbench" and cfg.secret_plans is False
    assert eval_config_from_args(_parse([])).secret_plans is True
