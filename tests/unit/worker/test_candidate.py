"""The candidate worker's own checks (musaenv.worker.candidate), in this process: output checks on real tensors,
the candidate's module loaded for real, and the worker's side of the channel over real pipes. The run itself
(sandbox, trials, timing) is covered by the evaluator's tests, which start real workers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from musaenv.isolation.channel import Channel
from musaenv.isolation.messages import PROTOCOL_VERSION, Go, Ready, Result, Stage
from musaenv.worker import candidate
from musaenv.worker.failures import CandidateFailure


def test_same_bits_is_nan_safe_and_dtype_strict() -> None:
    nan = torch.tensor([float("nan"), 1.0])
    assert candidate._same_bits(nan, nan.clone()) and not torch.equal(nan, nan.clone())
    assert not candidate._same_bits(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert not candidate._same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))  # equal values, other bits
    assert candidate._same_bits(torch.empty(0), torch.empty(0))


def test_check_outputs_flags_each_way_an_output_can_cheat() -> None:
    x = torch.arange(6.0)
    original = [x.clone()]
    assert candidate._check_outputs([x * 2], [x], original) == []
    assert candidate._check_outputs([x[1:]], [x], original) == ["output_aliases_input"]
    assert candidate._check_outputs([x.tolist()], [x], original) == ["output_not_tensor"]
    sub = torch.nn.Parameter(torch.ones(2))  # a Tensor subclass: refused by exact type
    assert candidate._check_outputs([sub], [x], original) == ["output_not_tensor"]
    assert candidate._check_outputs([torch.ones(2).to_sparse()], [x], original) == ["output_not_dense"]
    x.add_(1)  # the candidate wrote into its input
    assert candidate._check_outputs([torch.ones(1)], [x], original) == ["input_mutation"]


def _load(tmp_path: Path, source: str, failed: list[str] | None = None) -> type:
    req = SimpleNamespace(workdir=str(tmp_path), candidate=source)
    return candidate._load_candidate(req, SimpleNamespace(failed=failed or []))  # type: ignore[arg-type]


def test_load_candidate_verdicts(tmp_path: Path) -> None:
    cls = _load(tmp_path, "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    assert cls.__name__ == "ModelNew"
    with pytest.raises(CandidateFailure) as e:
        _load(tmp_path, "ModelNew = 3\n")
    assert e.value.stage == "format_error"
    with pytest.raises(CandidateFailure) as e:
        _load(tmp_path, "raise SystemExit(3)\n")  # anything a module raises, SystemExit included
    assert e.value.stage == "runtime_error" and "SystemExit" in e.value.log
    with pytest.raises(CandidateFailure) as e:  # a failed build explains the import error that follows it
        _load(tmp_path, "raise ImportError('no module')\n", failed=["error: expected ';'"])
    assert e.value.stage == "compile_error" and e.value.log == "error: expected ';'"


@pytest.fixture
def link() -> Iterator[tuple[Channel, Channel]]:
    parent, (child_r, child_w) = Channel.pair()
    worker = Channel(child_r, child_w)
    yield parent, worker
    for ch in (parent, worker):
        ch.close()


def test_wait_for_go_refuses_any_other_message(link: tuple[Channel, Channel]) -> None:
    parent, worker = link
    parent.send(Go().to_dict())
    candidate._wait_for_go(worker)
    parent.send(Stage("trials").to_dict())
    with pytest.raises(CandidateFailure) as e:
        candidate._wait_for_go(worker)
    assert e.value.stage == "infra_error" and "'stage'" in e.value.log


def test_serve_says_ready_then_answers_a_malformed_request_as_infra(link: tuple[Channel, Channel]) -> None:
    parent, worker = link
    parent.send({"type": "eval", "candidate": "x"})  # fields missing: the parent's fault, not a candidate's
    assert candidate.serve(worker, "candidate") == 0
    ready = Ready.from_dict(parent.recv()[0])
    assert ready.pid == os.getpid() and ready.protocol == PROTOCOL_VERSION and ready.torch == torch.__version__
    result = Result.from_dict(parent.recv()[0])
    assert result.failure is not None and result.failure.stage == "infra_error"
    assert "malformed evaluation request" in result.failure.log
