"""musaenv's compile-only CUDA verdicts (nvcc, no GPU) against torch's own build of the same sources here.

``compiled`` must mean what torch's ``load_inline`` would give: the sources build and the module's symbols all
resolve (:func:`tests.fidelity.truth.torch_builds_cuda` builds with torch itself and looks every undefined symbol
up with the dynamic loader). A ``load_inline`` call torch rejects is that ``TypeError``; a program whose extension
is built in ``forward`` is driven there; a program that builds nothing is never ``compiled``; and no compile-only
evaluation draws the reference's inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from musaenv import _env
from musaenv.config import EvalConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.tasks.task import Task
from musaenv.types import EvalResult, Stage
from tests.fidelity import programs as P
from tests.fidelity.truth import torch_builds_cuda, torch_runs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_env.cuda_home() is None, reason="needs nvcc (CUDA_HOME or /usr/local/cuda)"),
]

RELU_REF = P.RELU_REF.format(cuda=".cuda()")  # KernelBench's own prompt examples draw inputs this way
TASK = Task(id="fid_cuda_relu", level=1, source=RELU_REF)


@pytest.fixture(scope="module")
def evaluators() -> Iterator[dict[str, LocalEvaluator]]:
    made = {policy: LocalEvaluator("cuda", EvalConfig(static_policy=policy)) for policy in ("kernelbench", "off")}
    if not made["kernelbench"].backend.compile_only:
        for ev in made.values():
            ev.close()
        pytest.skip("a CUDA GPU is visible: the compile-only path is not taken (see tests/gpu)")
    yield made
    for ev in made.values():
        ev.close()


@pytest.fixture(scope="module")
def torch_truth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """torch's own build of the two CUDA programs' sources (one build directory: the second rebuilds main.cpp)."""
    work = tmp_path_factory.mktemp("torch_cuda")
    return {
        decl: torch_builds_cuda("fid_relu", cpp, P.RELU_CU, ["relu_forward"], work)
        for decl, cpp in (("declared", P.RELU_DECL), ("extern_c", P.EXTERN_C_DECL))
    }


def _eval(ev: LocalEvaluator, candidate: str, task: Task = TASK) -> EvalResult:
    return ev.evaluate(task, candidate, seed=7)


def test_honest_program_through_module_containers_is_compiled_as_torch_builds_it(evaluators, torch_truth):
    truth = torch_truth["declared"]
    assert truth["built"] and truth["unresolved"] == [], truth
    r = _eval(evaluators["kernelbench"], P.container_relu_program(P.RELU_DECL, P.RELU_CU))
    assert r.stage is Stage.COMPILED and r.policy == "kernelbench", r.to_dict()
    assert r.extra["builds"] and "no_custom_kernel" not in r.warnings


def test_extern_c_declaration_is_a_compile_error_as_the_import_would_be(evaluators, torch_truth):
    truth = torch_truth["extern_c"]
    assert truth["built"] and truth["unresolved"] == ["relu_forward"], truth  # torch builds it; import cannot work
    r = _eval(evaluators["kernelbench"], P.relu_program(P.EXTERN_C_DECL, P.RELU_CU))
    assert r.stage is Stage.COMPILE_ERROR, r.to_dict()
    assert "undefined reference to `relu_forward'" in r.compiler_log


def test_lazy_build_in_forward_is_driven_there(evaluators, torch_truth):
    assert torch_truth["declared"]["built"]  # the call forward makes is the module-level one of the first test
    r = _eval(evaluators["kernelbench"], P.lazy_relu_program(P.RELU_DECL, P.RELU_CU))
    assert r.stage is Stage.COMPILED, r.to_dict()
    assert len(r.extra["builds"]) == 1


def test_a_program_that_builds_nothing_is_never_compiled(evaluators):
    torch_only = P._HEAD + P.RELU_FORWARD.replace("ext.relu_forward(x)", "torch.relu(x)")
    r = _eval(evaluators["off"], torch_only)
    assert r.stage is Stage.INFRA_ERROR and r.flags == ("not_built",), r.to_dict()


@pytest.mark.parametrize(
    "candidate",
    [
        P.relu_program(P.RELU_DECL, P.RELU_CU, extra=", extra_cuda_flags=['-O3']"),
        P._HEAD
        + f'ext = load_inline(name="x", cuda_sources={P.RELU_CU!r}, functions=["relu_forward"])\n'
        + P.RELU_FORWARD,
    ],
    ids=["unknown_kwarg", "no_cpp_sources"],
)
def test_load_inline_calls_torch_rejects_fail_with_torchs_message(evaluators, candidate, tmp_path):
    truth = torch_runs(P.RELU_REF.format(cuda=""), candidate, tmp_path)
    assert truth["outcome"] == "TypeError", truth  # raised before anything is built
    r = _eval(evaluators["kernelbench"], candidate)
    assert r.stage is Stage.RUNTIME_ERROR and truth["error"] in r.runtime_log, (truth, r.to_dict())


def test_partial_rewrite_is_kernelbench_compiled_and_strict_cheating(evaluators, torch_truth):
    assert torch_truth["declared"]["built"]  # the same sources
    program = P.partial_rewrite_program(P.RELU_DECL, P.RELU_CU)
    r = _eval(evaluators["kernelbench"], program)
    assert r.stage is Stage.COMPILED and "forbidden_torch_op" in r.warnings, r.to_dict()
    ev = evaluators["kernelbench"]
    strict = LocalEvaluator(ev.backend, dataclasses.replace(ev.config, static_policy="strict"))
    with strict:
        r = _eval(strict, program)
    assert r.stage is Stage.CHEATING and "forbidden_torch_op" in r.flags and r.policy == "strict", r.to_dict()


def test_compile_only_draws_no_reference_input(evaluators):
    undrawable = Task(id="fid_undrawable_cuda", level=1, source=P.UNDRAWABLE_REF.format(cuda=""))
    r = _eval(evaluators["kernelbench"], P.relu_program(P.RELU_DECL, P.RELU_CU), undrawable)
    assert r.stage is Stage.COMPILED, r.to_dict()  # get_inputs raises: it was never called
