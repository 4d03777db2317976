"""Triton candidates without a GPU: real worker processes running kernels in Triton's interpreter on CPU tensors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.local import LocalEvaluator
from musaenv.evaluator.plan import INTERPRETER_TIME_FACTOR
from musaenv.tasks.builtin import get_task, solution_source
from musaenv.toolchains.triton_aot import triton_aot_check
from musaenv.types import Stage

triton = pytest.importorskip("triton")
TRITON = tuple(int(p) for p in triton.__version__.split(".")[:2])
if TRITON < (3, 2):
    pytest.skip("Triton's interpreter needs triton >= 3.2 here (musaenv refuses older ones)", allow_module_level=True)

pytestmark = pytest.mark.slow

RUN_LIMIT_S = 4.0
FAST = EvalConfig(run_timeout_s=120.0, timing=TimingConfig(repeats=3, warmup=1, max_time_s=2.0))

_RELU_TEMPLATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
{body}


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous(){pre}
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 65536),)](x, out, n, BLOCK=65536)
        return out{post}
"""


def _relu(body: str, pre: str = "", post: str = "") -> str:
    code = _RELU_TEMPLATE.format(body=body, pre=pre, post=post)
    return f"```python\n{code}\n```"


WRONG = _relu("    tl.store(out_ptr + offs, tl.where(x > 0, x, 0.5 * x), mask=mask)")
# Computes in bf16: the interpreter keeps bf16 as raw uint16 bits, so its arithmetic would be garbage.
# bf16 arithmetic (triton 3.6's interpreter computes tl.maximum on bf16 correctly, 3.9's does not: both refuse x * 1.0)
BF16 = _relu(
    "    tl.store(out_ptr + offs, tl.maximum(x * 1.0, 0.0), mask=mask)",
    pre="\n        x = x.to(torch.bfloat16)",
    post=".float()",
)
# No mask and a huge offset: the interpreter writes through a raw pointer and the process dies.
OOB_STORE = _relu("    tl.store(out_ptr + offs + (1 << 40), tl.maximum(x, 0.0))")


@pytest.fixture(scope="module")
def evaluator():
    ev = LocalEvaluator("triton", FAST)
    yield ev
    ev.close()


def test_interpreted_grids_get_room_and_no_timing() -> None:
    """Many small programs per launch (the style of public generations; here 2,048 of 1,024 elements): the
    interpreter runs them one by one in Python, past the run limit a GPU kernel gets (11-15 CPU s here, limit 4 s).
    Judged on correctness with INTERPRETER_TIME_FACTOR x the limit, it is correct (it was a timeout, -1); an endless
    kernel is still the candidate's timeout."""
    small_blocks = _relu("    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)").replace("65536", "1024")
    with LocalEvaluator("triton", FAST.replace(run_timeout_s=RUN_LIMIT_S)) as ev:
        assert ev.config.run_timeout_s == RUN_LIMIT_S * INTERPRETER_TIME_FACTOR and not ev.config.timing.enabled
        r = ev.evaluate(get_task("l1_relu"), small_blocks, seed=1)
        assert r.stage is Stage.CORRECT, r.to_dict()
        assert r.speedup is None
        trials = next(u for u in r.extra["cpu"] if u["phase"] == "trials")
        assert trials["cpu_s"] > RUN_LIMIT_S, trials  # past the limit a GPU kernel gets: it was a timeout before
        endless = _relu("    while n > 0:\n        n = n + 1\n    tl.store(out_ptr + offs, x, mask=mask)")
        assert ev.evaluate(get_task("l1_relu"), endless, seed=2).stage is Stage.TIMEOUT


# A KernelBench-format file at GPU sizes (6 GiB a call): derived, its cpu tier is 32 MB a call, its interp tier 4 MiB.
RELU_FILE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def test_a_derived_task_is_judged_at_interpreter_sized_shapes(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidate and reference run at the interp tier's shapes (smaller than the cpu tier's, still many blocks of
    1,024 and an odd shape), and the result says which and why. (The tier changes no limit: an endless kernel is
    the candidate's timeout, test_interpreted_grids_get_room_and_no_timing.)"""
    from musaenv.tasks.external import load_external

    monkeypatch.setenv("MUSAENV_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "level1").mkdir()
    path = tmp_path / "level1" / "relu_big.py"
    path.write_text(RELU_FILE)
    task = load_external(path)
    interp = task.shapes["interp"]
    assert (
        len(interp) == 2
        and interp[0]["batch_size"] * interp[0]["dim"]
        < task.shapes["cpu"][0]["batch_size"] * (task.shapes["cpu"][0]["dim"])
    )
    assert min(s["batch_size"] * s["dim"] for s in interp) > 16 * 1024  # more than 16 programs of 1,024 elements
    small_blocks = _relu("    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)").replace("65536", "1024")
    with LocalEvaluator("triton", FAST.replace(run_timeout_s=RUN_LIMIT_S)) as ev:
        assert ev.tier == "interp"
        r = ev.evaluate(task, small_blocks, seed=1)
        assert r.stage is Stage.CORRECT, r.to_dict()
        said = r.extra["shapes"]
        assert said["tier"] == "interp" and said["shapes"] == [dict(s) for s in interp], said
        assert said["cpu_shapes"] == [dict(s) for s in task.shapes["cpu"]]
        assert any("interpreter-sized shapes" in m for m in r.messages), r.messages
        wrong = ev.evaluate(task, WRONG, seed=2)  # compared with the reference at the same (interp) shapes
        assert wrong.stage is Stage.INCORRECT and wrong.extra["shapes"]["tier"] == "interp"


def test_triton_without_gpu_runs_in_the_interpreter(evaluator):
    assert evaluator.backend.device == "cpu"
    assert "TRITON_INTERPRET" in evaluator.backend.reason


@pytest.mark.parametrize("task_id", ["l1_relu", "l1_softmax"])
def test_shipped_triton_solution_is_correct(evaluator, task_id):
    r = evaluator.evaluate(get_task(task_id), solution_source(task_id, "triton"), seed=1)
    assert r.stage is Stage.CORRECT, r.to_dict()
    assert r.trials_passed == r.trials_total == FAST.num_trials + FAST.stress_count
    assert r.speedup is None and r.timing is None  # interpreted speed says nothing of the kernel: not measured
    aot = r.extra["triton_aot"]  # also compiled for a GPU at the GPU tier's first shape
    assert aot["ok"] and aot["kernels"] and aot["kernels"][0]["arch"] == 90


# tl.dot of an 8192 x 8 tile: numpy's matmul in the interpreter is happy; for sm_90 the tile needs more shared memory
# than a block has (triton 3.9: 262400 > 232448 bytes; older Triton refuses dot dimensions under 16 outright).
SMALL_DOT = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, ROWS: tl.constexpr):
    rows = tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, 8)[None, :]
    offs = tl.program_id(0).to(tl.int64) * ROWS * 8 + rows * 8 + cols
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    eye = (tl.arange(0, 8)[:, None] == tl.arange(0, 8)[None, :]).to(tl.float32)
    y = tl.dot(x, eye, input_precision="ieee")
    tl.store(out_ptr + offs, tl.maximum(y, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 8192 * 8),)](x, out, n, ROWS=8192)
        return out
"""


def test_kernel_correct_in_the_interpreter_but_not_compilable_is_a_compile_error(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), SMALL_DOT, seed=6)
    if TRITON < (3, 6) and r.stage is Stage.RUNTIME_ERROR:  # older front ends refuse the tile in the interpreter
        assert ">= 16" in r.runtime_log, r.runtime_log[-2000:]
        return
    assert r.stage is Stage.COMPILE_ERROR, r.to_dict()
    assert r.trials_passed == r.trials_total == FAST.num_trials + FAST.stress_count  # the interpreter's run was right
    assert not r.extra["triton_aot"]["ok"] and r.extra["triton_aot"]["inconclusive"] is None
    assert "shared memory" in r.compiler_log or ">= 16" in r.compiler_log, r.compiler_log
    assert any("does not compile for sm_90" in m for m in r.messages)


def test_wrong_triton_kernel_is_incorrect(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), WRONG, seed=2)
    assert r.stage is Stage.INCORRECT, r.to_dict()
    assert r.trials_passed == 0 and r.max_abs_error is not None and r.max_abs_error > 0.1


def test_bf16_candidate_reports_the_interpreter_limit_unscored(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), BF16, seed=3)
    assert r.stage is Stage.COMPILED and r.flags == ("needs_gpu",), r.to_dict()  # unscored: a GPU would run it
    assert "Triton interpreter limit" in r.runtime_log and "bfloat16" in r.runtime_log
    assert "bfloat16" in r.messages[0]


def test_out_of_bounds_store_is_a_runtime_error_and_evaluator_recovers(evaluator):
    r = evaluator.evaluate(get_task("l1_relu"), OOB_STORE, seed=4)
    assert r.stage is Stage.RUNTIME_ERROR, r.to_dict()
    assert "SIGSEGV" in r.runtime_log or "SIGBUS" in r.runtime_log
    after = evaluator.evaluate(get_task("l1_relu"), solution_source("l1_relu", "triton"), seed=5)
    assert after.stage is Stage.CORRECT


_GUARD_SCRIPT = textwrap.dedent(
    """
    import torch, triton, triton.language as tl
    from musaenv.backends.triton_interp import TritonInterpreterLimitError, install_interpreter_guards

    assert install_interpreter_guards()

    @triton.jit
    def affine(x_ptr, out_ptr, n, UPCAST: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
        tl.store(out_ptr + offs, (x * 2.0 + 1.0).to(out_ptr.dtype.element_ty), mask=mask)

    x = torch.randn(1000).to(torch.bfloat16)
    out = torch.empty_like(x)
    affine[(4,)](x, out, 1000, UPCAST=True, BLOCK=256)
    # The interpreter's fp32 -> bf16 cast truncates where torch rounds to nearest: one bf16 ulp apart at most.
    assert torch.allclose(out.float(), x.float() * 2 + 1, rtol=1e-2, atol=1e-2), "upcast kernel must stay right"
    try:
        affine[(4,)](x, out, 1000, UPCAST=False, BLOCK=256)
    except Exception as e:
        assert isinstance(e.__cause__, TritonInterpreterLimitError), repr(e)
        print("REFUSED:", e.__cause__)
    else:
        raise AssertionError("bf16 arithmetic ran in the interpreter")
    """
)


def test_interpreter_guard_refuses_bf16_arithmetic_and_keeps_upcasts_working():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _GUARD_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED: Triton interpreter limit: bfloat16 multiply" in proc.stdout


def test_aot_check_compiles_a_shipped_solution_for_sm90():
    task = get_task("l1_softmax")
    check = triton_aot_check(task.source, solution_source("l1_softmax", "triton"), shape=task.shapes["gpu"][1])
    assert check.ok, check.log
    assert [k["name"] for k in check.kernels] == ["softmax_kernel"]
    kernel = check.kernels[0]
    assert kernel["arch"] == 90 and kernel["ptx_chars"] > 0
    assert kernel["constexprs"]["BLOCK"] == "4096"  # the GPU branch of the host code was taken


def test_aot_check_reports_a_compile_error_with_the_source_line():
    body = "    tl.store(out_ptr + offs, tl.no_such_function(x), mask=mask)"
    broken = _RELU_TEMPLATE.format(body=body, pre="", post="")
    check = triton_aot_check(get_task("l1_relu").source, broken, shape={"batch_size": 7, "dim": 1001})
    assert not check.ok and check.inconclusive is None
    if TRITON < (3, 6):  # older front ends raise a bare AttributeError, without the source line
        assert "no_such_function" in check.log, check.log
        return
    assert "CompilationError" in check.log and "tl.no_such_function(x)" in check.log


def test_aot_check_limits_cpu_seconds_and_a_stall_is_infra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile check is limited in CPU seconds of its child (a spinning candidate fails it); a child that only
    waits (here: sleeps, as a host too busy to run it would look) ends at the wall-clock backstop as infra_error."""
    from musaenv.isolation import limits

    task = get_task("l1_relu").source
    spin = triton_aot_check(task, "while True:\n    pass\n", timeout_s=4.0)
    assert not spin.ok and spin.infra_error is None and "CPU seconds" in spin.log, spin
    monkeypatch.setattr(limits, "BACKSTOP_FACTOR", 0.0)
    monkeypatch.setattr(limits, "BACKSTOP_EXTRA_S", 3.0)
    stall = triton_aot_check(task, "import time\ntime.sleep(600)\n", timeout_s=4.0)
    assert not stall.ok and stall.infra_error and "backstop" in stall.infra_error, stall
    assert stall.seconds < 20, stall.seconds
