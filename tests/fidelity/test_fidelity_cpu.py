"""musaenv's verdicts on KernelBench-style C++ programs against what torch itself does with the same source.

Each program runs twice: through musaenv (backend ``cpu``, the default ``strict`` policy) and under real torch in a
fresh subprocess (:func:`tests.fidelity.truth.torch_runs`: torch's own ``load_inline`` builds and imports the
extension, ``ModelNew`` runs on the reference's inputs). The verdict must be the one torch's behaviour implies:
torch runs it and matches -> ``correct``; the import fails -> ``compile_error``; torch raises ``TypeError`` from
``load_inline`` -> ``runtime_error`` with torch's own message; the reference itself fails -> the task's
``infra_error``, never the candidate's score.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.task import Task
from musaenv.types import EvalResult, Stage
from tests.fidelity import programs as P
from tests.fidelity.truth import torch_runs

pytestmark = pytest.mark.slow

RELU_REF = P.RELU_REF.format(cuda="")
CASES = {  # name -> (reference, candidate)
    "module_containers": (RELU_REF, P.container_relu_program(P.RELU_CPP)),
    "isinstance_mlp": (P.MLP_REF, P.mlp_program()),
    "lazy_build_in_forward": (RELU_REF, P.lazy_relu_program(P.RELU_CPP)),
    "declared_never_defined": (
        RELU_REF,
        P._HEAD + P.module_level(P.DECLARED_ONLY_CPP, None, '["relu_forward", "relu_backward"]') + P.RELU_FORWARD,
    ),
    "unknown_load_inline_kwarg": (RELU_REF, P.relu_program(P.RELU_CPP, extra=", extra_cuda_flags=['-O3']")),
    "no_cpp_sources": (
        RELU_REF,
        P._HEAD
        + 'ext = load_inline(name="fid_ext", cuda_sources="", functions=["relu_forward"])\n\n\n'
        + P.RELU_FORWARD,
    ),
}
EXPECTED = {"ok": Stage.CORRECT, "ImportError": Stage.COMPILE_ERROR, "TypeError": Stage.RUNTIME_ERROR}


@pytest.fixture(scope="module")
def evaluator() -> Iterator[LocalEvaluator]:
    config = EvalConfig(num_trials=2, timing=TimingConfig(enabled=False))
    with LocalEvaluator("cpu", config) as ev:
        yield ev


@pytest.fixture(scope="module")
def torch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One torch extension cache for the module: programs sharing a kernel source build it once."""
    return tmp_path_factory.mktemp("torch_extensions")


def _log(r: EvalResult) -> str:
    return f"{r.compiler_log}\n{r.runtime_log}"


@pytest.mark.parametrize("name", list(CASES))
def test_verdict_follows_torch(name: str, evaluator: LocalEvaluator, torch_dir: Path) -> None:
    reference, candidate = CASES[name]
    truth = torch_runs(reference, candidate, torch_dir)
    r = evaluator.evaluate(Task(id=f"fid_{name}", level=1, source=reference), candidate, seed=3)
    assert truth["outcome"] in EXPECTED, truth
    assert r.stage is EXPECTED[truth["outcome"]], (truth, r.to_dict())
    if truth["outcome"] == "TypeError":  # torch's own words, from the hook that has torch's signature
        assert truth["error"] in r.runtime_log, (truth, r.runtime_log)
    if truth["outcome"] == "ImportError":  # torch: "undefined symbol: <mangled relu_backward>"
        assert "undefined symbol" in truth["error"] and "undefined symbol" in _log(r), (truth, _log(r))


def test_cuda_reference_is_mapped_to_the_evaluation_device(evaluator: LocalEvaluator, torch_dir: Path) -> None:
    """KernelBench's prompt examples draw inputs with ``.cuda()``: on a CPU torch that fails before any candidate
    is involved. musaenv maps it to the evaluation's device, and the verdict is the one of the CPU reference."""
    cuda_ref = P.RELU_REF.format(cuda=".cuda()")
    candidate = P.relu_program(P.RELU_CPP)
    assert torch_runs(cuda_ref, candidate, torch_dir)["outcome"] == "AssertionError"  # not compiled with CUDA
    assert torch_runs(RELU_REF, candidate, torch_dir)["outcome"] == "ok"
    r = evaluator.evaluate(Task(id="fid_cuda_ref", level=1, source=cuda_ref), candidate, seed=4)
    assert r.stage is Stage.CORRECT, r.to_dict()
    device_kw = P.RELU_REF.replace("torch.randn(N){cuda}", 'torch.randn(N, device="cuda")')
    r = evaluator.evaluate(Task(id="fid_cuda_kw", level=1, source=device_kw), candidate, seed=4)
    assert r.stage is Stage.CORRECT, r.to_dict()


def test_a_reference_that_cannot_draw_is_the_tasks_infra_error(evaluator: LocalEvaluator, torch_dir: Path) -> None:
    reference = P.UNDRAWABLE_REF.format(cuda="")
    candidate = P.relu_program(P.RELU_CPP)
    truth = torch_runs(reference, candidate, torch_dir)
    assert truth == {"outcome": "RuntimeError", "error": "inputs drawn"}  # the reference's own failure
    task = Task(id="fid_undrawable", level=1, source=reference)
    first = evaluator.evaluate(task, candidate, seed=5)
    assert first.stage is Stage.INFRA_ERROR and first.flags == ("task_inputs",), first.to_dict()
    assert "inputs drawn" in first.messages[0] and "Traceback" in first.messages[0]  # the reference's traceback
    again = evaluator.evaluate(task, candidate, seed=6)  # refused once: no worker runs the candidate again
    assert again.stage is Stage.INFRA_ERROR and again.messages == first.messages and again.extra == {}
