"""Ahead-of-time compile check of a Triton candidate's kernels for an NVIDIA GPU, on a machine without one.

Triton's interpreter (``TRITON_INTERPRET=1``) runs kernels on the CPU but never compiles them, so a kernel
that the interpreter runs can still fail to compile for a GPU (unsupported ops, too much shared memory, a
``tl.dot`` shape the hardware cannot do). This module compiles them for real:

1. A child process (in the worker sandbox, processes allowed for ptxas) installs a *compile-only driver* in
   Triton (current device 0, target ``GPUTarget("cuda", arch, 32)``), so ``JITFunction.run`` works without a GPU.
2. Each ``kernel[grid](...)`` launch is turned into ``run(..., warmup=True)``: Triton's own binder derives
   the signature and specialisation (pointer dtypes, i32/i64, divisibility by 16, constexpr values, num_warps)
   from the real launch arguments, then compiles to TTIR, TTGIR, LLVM IR, PTX and a cubin (bundled ptxas)
   and returns without launching. Autotuned kernels compile every config.
3. ``ModelNew.forward`` runs on the task's inputs as *fake CUDA tensors* (``FakeTensorMode``; no storage,
   ``is_cuda`` is True), so host code takes its GPU branch and launches with the block sizes a GPU would get.
4. Each cubin's registers and shared memory are read back (bundled ``cuobjdump``) and checked against the
   target's per-block limits.

What it cannot see: anything that needs values (host code reading tensor data, ``.item()``, data-dependent
grids) makes the check *inconclusive*, not failed; launch-time errors and wrong results need a GPU.
Measured costs: ``docs/backends.md``.

Size: the parent's side and the child's compile-only driver of one check; the child runs this module with -m, so
both live in one importable file.
"""
# Kept whole (~420 lines): the parent's check and the child it starts (``python -m musaenv.toolchains.triton_aot``,
# found by that name in evaluator/interrupt.py) share one request/result format; a split would move the child.

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv import _env

__all__ = ["TritonAotCheck", "triton_aot_check"]

log = logging.getLogger(__name__)

# Maximum shared memory per thread block (opt-in), bytes, by compute capability: CUDA C++ Programming Guide,
# "Features and Technical Specifications", table "Technical Specifications per Compute Capability".
SHARED_LIMIT_BYTES = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 89: 101376, 90: 232448, 100: 232448}
REGISTERS_PER_BLOCK = 65536  # 64 K 32-bit registers per block on every architecture from sm_70 on (same table)
_LOG_CHARS = 20000


@dataclass(frozen=True)
class TritonAotCheck:
    """Outcome of :func:`triton_aot_check`.

    Attributes:
        ok: Every launched kernel compiled to a cubin that fits the target's per-block limits.
        log: What happened, with compiler errors verbatim.
        seconds: Wall time of the whole check (child start and ``import triton`` included).
        kernels: One JSON-safe record per compiled kernel: ``name``, ``signature``, ``constexprs``,
            ``num_warps``, ``num_stages``, ``shared_bytes``, ``registers``, ``ptx_chars``, ``seconds``.
        inconclusive: Why the candidate could not be checked (e.g. its forward needs tensor values);
            ``None`` when the verdict is meaningful.
        infra_error: Why the host, not the candidate, ended the check (its wall-clock backstop ran out while the
            child used less than its CPU seconds); ``None`` otherwise. The evaluation is then ``infra_error``.
    """

    ok: bool
    log: str
    seconds: float
    kernels: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    inconclusive: str | None = None
    infra_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        return {
            "ok": self.ok,
            "log": self.log,
            "seconds": self.seconds,
            "kernels": [dict(k) for k in self.kernels],
            "inconclusive": self.inconclusive,
            "infra_error": self.infra_error,
        }


def triton_aot_check(
    task_source: str,
    candidate_source: str,
    *,
    shape: dict[str, Any] | None = None,
    arch: int = 90,
    timeout_s: float = 180.0,
) -> TritonAotCheck:
    """Compile every Triton kernel that ``ModelNew.forward`` launches, for ``sm_{arch}``, without a GPU.

    The candidate's code runs in a child process (its own session), killed when its process tree has used
    ``timeout_s`` CPU seconds (a failed check) or at the wall-clock backstop
    (:func:`musaenv.isolation.limits.backstop_s`; :attr:`TritonAotCheck.infra_error`). A bad candidate is a failed
    check, never an exception.

    Args:
        task_source: The KernelBench-format reference program (gives ``get_inputs``/``get_init_inputs``).
        candidate_source: The candidate module (defines ``ModelNew`` and its ``@triton.jit`` kernels).
        shape: Overrides of the task's size globals (e.g. a built-in task's first ``gpu`` shape).
        arch: Compute capability to compile for (90 = Hopper).
        timeout_s: CPU-second limit of the child's process tree.

    Returns:
        A :class:`TritonAotCheck`.
    """
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="musaenv-tritonaot-") as tmp:
        work = Path(tmp)
        request = {"task_source": task_source, "shape": shape or {}, "arch": int(arch)}
        (work / "request.json").write_text(json.dumps(request))
        (work / "candidate.py").write_text(candidate_source)
        rc, over, output = _run_child(work, timeout_s)
        result = _read_json(work / "result.json")
    seconds = round(time.monotonic() - start, 3)
    if over == "cpu":
        return TritonAotCheck(False, f"compile check killed after {timeout_s:.0f} CPU seconds\n{output}", seconds)
    if over == "backstop":
        from musaenv.isolation.limits import backstop_s

        why = (f"the compile check ran past its {backstop_s(timeout_s):.0f} s wall-clock backstop using less than "
               f"its {timeout_s:.0f} CPU seconds: the host was too slow (not the candidate)")  # fmt: skip
        return TritonAotCheck(False, f"{why}\n{output}", seconds, infra_error=why)
    if not result:
        return TritonAotCheck(
            False,
            f"the compile-check process died (exit {rc}) before reporting:\n{output}",
            seconds,
            inconclusive="the checker crashed",
        )
    return TritonAotCheck(
        ok=bool(result["ok"]),
        log=str(result["log"])[-_LOG_CHARS:],
        seconds=seconds,
        kernels=tuple(result.get("kernels", [])),
        inconclusive=result.get("inconclusive"),
    )


def _run_child(work: Path, timeout_s: float) -> tuple[int, str | None, str]:
    """Run the check's child; returns its exit code, which limit ended it (``cpu``, ``backstop``, None), its log."""
    from musaenv.isolation.limits import watch_process
    from musaenv.isolation.proctree import kill_tree

    env = _env.child_env(threads=1)
    env.pop("TRITON_INTERPRET", None)  # the interpreter would replace the compiler this check is about
    env["TRITON_CACHE_DIR"] = str(_env.cache_dir() / "triton-aot")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9 warns when unset; 1 is its current default
    with open(work / "child.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "musaenv.toolchains.triton_aot", str(work)],
            cwd=str(work),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:  # CPU seconds of the child's tree, not wall time: a busy host does not fail the candidate
            over = watch_process(proc, timeout_s)
        finally:  # also on KeyboardInterrupt: no check outlives its request
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
    text = (work / "child.log").read_text(errors="replace")
    return proc.returncode, over, text[-_LOG_CHARS:]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


# --------------------------------------------------------------------------------------------------------
# Child side: runs the candidate, with torch and triton imported only here.


class _CompileOnlyDriver:
    """Just enough of a Triton driver for ``JITFunction.run(..., warmup=True)``: a device, a stream, a target."""

    def __init__(self, arch: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)  # NVIDIA warps are 32 threads wide

    def get_current_device(self) -> int:
        return 0

    def get_active_torch_device(self) -> Any:  # the tutorials' DEVICE = driver.active.get_active_torch_device()
        import torch

        return torch.device("cuda", 0)

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    def is_active(self) -> bool:
        return True


class _Recorder:
    """Compiles every launch instead of running it, and keeps one record per compiled kernel."""

    def __init__(self, arch: int) -> None:
        self.arch = arch
        self.kernels: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._seen: set[int] = set()

    def compile_launch(self, run: Any, jit_fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        mocked = [_mock(a) if _is_tensor(a) else a for a in args]
        mocked_kw = {k: _mock(v) if _is_tensor(v) else v for k, v in kwargs.items()}
        name = getattr(jit_fn, "__name__", "kernel")
        started = time.monotonic()
        try:
            kernel = run(jit_fn, *mocked, grid=(1,), warmup=True, **mocked_kw)
        except Exception as e:  # a compiler verdict on the candidate's kernel
            self.errors.append(f"kernel {name}: {type(e).__name__}: {e}")
            raise _CompileFailed from None
        if kernel is None or id(kernel) in self._seen:
            return
        self._seen.add(id(kernel))
        names = list(getattr(jit_fn, "arg_names", []))
        self.kernels.append(_kernel_record(kernel, name, names, time.monotonic() - started, self.arch))


class _CompileFailed(Exception):
    """Stops the candidate's forward at the first kernel that does not compile."""


def _mock(t: Any) -> Any:
    """Triton's stand-in for a tensor argument: dtype and shape (triton < 3.2 takes the dtype only)."""
    from triton.runtime.jit import MockTensor

    try:
        return MockTensor(t.dtype, list(t.shape))
    except TypeError:
        return MockTensor(t.dtype)


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _kernel_record(kernel: Any, name: str, arg_names: list[str], seconds: float, arch: int) -> dict[str, Any]:
    md = kernel.metadata
    src = kernel.src

    def arg(path: Any) -> str:  # triton keys constexprs by argument path, e.g. (3,)
        top = path[0] if isinstance(path, tuple) and path else path
        return arg_names[top] if isinstance(top, int) and top < len(arg_names) else str(path)

    return {
        "name": name,
        "signature": {str(k): str(v) for k, v in getattr(src, "signature", {}).items()},
        "constexprs": {arg(k): repr(v) for k, v in getattr(src, "constants", {}).items()},
        "num_warps": int(md.num_warps),
        "num_stages": int(getattr(md, "num_stages", 0)),
        "shared_bytes": int(md.shared),
        "registers": _registers(kernel.asm.get("cubin"), str(md.name)),
        "ptx_chars": len(kernel.asm.get("ptx", "")),
        "seconds": round(seconds, 3),
        "arch": arch,
    }


def _registers(cubin: bytes | None, fn_name: str) -> int | None:
    """Registers per thread of ``fn_name`` in ``cubin`` (Triton's bundled cuobjdump); ``None`` if unreadable."""
    import re

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not cubin or not tool.exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    m = re.search(rf"Function {re.escape(fn_name)}:\s*REG:(\d+)", out)
    return int(m.group(1)) if m else None


def _limit_problems(rec: dict[str, Any]) -> list[str]:
    problems = []
    shared_limit = SHARED_LIMIT_BYTES.get(int(rec["arch"]))
    if shared_limit is not None and rec["shared_bytes"] > shared_limit:
        problems.append(
            f"kernel {rec['name']} needs {rec['shared_bytes']} bytes of shared memory per block; "
            f"sm_{rec['arch']} allows {shared_limit} (use smaller tiles or fewer num_stages)"
        )
    regs = rec.get("registers")
    if regs is not None and regs * rec["num_warps"] * 32 > REGISTERS_PER_BLOCK:
        problems.append(
            f"kernel {rec['name']} needs {regs} registers x {rec['num_warps'] * 32} threads per block, more than "
            f"{REGISTERS_PER_BLOCK}: the launch would fail (use fewer warps or smaller blocks)"
        )
    return problems


def _install(recorder: _Recorder, arch: int) -> None:
    """Route launches of every JIT and autotuned kernel through ``recorder``."""
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    driver.set_active(_CompileOnlyDriver(arch))
    original = JITFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> None:
        recorder.compile_launch(original, self, args, kwargs)

    def autotuned(self: Any, *args: Any, **kwargs: Any) -> None:
        for config in self.configs:  # no GPU to benchmark on: every config must compile
            self.fn.run(*args, **{**kwargs, **config.all_kwargs()})

    JITFunction.run = run
    Autotuner.run = autotuned


def _fake_cuda(obj: Any, mode: Any) -> Any:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    if not isinstance(obj, torch.Tensor):
        return obj
    meta = obj if obj.is_meta else obj.to("meta")
    return FakeTensor(mode, meta, torch.device("cuda", 0))


def _build(req: dict[str, Any], work: Path) -> tuple[Any, list[Any], Any]:
    """(model, inputs, fake mode): reference inputs and the candidate's model, as storage-less CUDA tensors."""
    import importlib.util

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from musaenv.backends.cuda_view import CudaView

    ref: dict[str, Any] = {"__name__": "musaenv_aot_reference"}
    exec(compile(req["task_source"], "<reference>", "exec"), ref)
    ref.update(req.get("shape") or {})
    spec = importlib.util.spec_from_file_location("candidate", work / "candidate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module  # triton reads kernel sources through the module
    view = CudaView(host="meta")  # CUDA-written module code and __init__ (`.cuda()`, device="cuda") stay storage-less
    with view.active():
        spec.loader.exec_module(module)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with torch.device("meta"):  # no allocation: the sizes of GPU-tier inputs do not matter here
        init = list(ref["get_init_inputs"]())
        inputs = [_fake_cuda(x, mode) for x in ref["get_inputs"]()]
        with view.active():
            model = module.ModelNew(*init)
    model._apply(lambda t: _fake_cuda(t, mode))
    return model, inputs, mode


def _confine(work: Path) -> dict[str, Any]:
    """The worker sandbox (network, rlimits, writes only below ``work`` and Triton's cache), before candidate code.

    Processes stay allowed: Triton runs ptxas and this module runs cuobjdump.
    """
    from musaenv.config import SandboxConfig
    from musaenv.isolation.sandbox import enter_sandbox

    cache = os.environ.get("TRITON_CACHE_DIR")
    extra = [cache] if cache else []
    for p in extra:
        Path(p).mkdir(parents=True, exist_ok=True)
    report = enter_sandbox(SandboxConfig(), work, block_processes=False, block_exec=False, extra_writable=extra)
    return dict(report.to_dict())


def _check(req: dict[str, Any], work: Path) -> dict[str, Any]:
    import torch

    from musaenv.backends.cuda_view import cuda_answers

    arch = int(req["arch"])
    recorder = _Recorder(arch)
    _install(recorder, arch)
    sandbox = _confine(work)
    try:
        model, inputs, mode = _build(req, work)
    except Exception as e:  # it loaded and ran in the interpreter: what this check cannot reproduce is its limit
        why = f"the candidate did not load here: {type(e).__name__}: {str(e)[:500]}"
        return {"ok": False, "log": why, "kernels": [], "inconclusive": why}
    try:
        with mode, torch.no_grad(), cuda_answers():  # torch.cuda.is_available() and the like, as on a GPU
            model(*inputs)
    except _CompileFailed:
        return {"ok": False, "log": "\n".join(recorder.errors), "kernels": recorder.kernels}
    except Exception as e:
        why = f"forward could not run on storage-less tensors ({type(e).__name__}: {str(e)[:500]})"
        return {"ok": False, "log": why, "kernels": recorder.kernels, "inconclusive": why}
    if not recorder.kernels:
        return {"ok": False, "log": "ModelNew.forward launched no Triton kernel", "kernels": []}
    problems = [p for rec in recorder.kernels for p in _limit_problems(rec)]
    summary = [
        f"{r['name']}: {r['num_warps']} warps, {r['shared_bytes']} B shared, {r['registers']} registers, "
        f"{r['seconds']:.2f} s"
        for r in recorder.kernels
    ]
    return {"ok": not problems, "log": "\n".join(problems + summary), "kernels": recorder.kernels, "sandbox": sandbox}


def main(work: Path) -> int:
    """Child entry point: read ``request.json`` in ``work``, write ``result.json``."""
    logging.basicConfig(level=logging.WARNING)
    req = json.loads((work / "request.json").read_text())
    result = _check(req, work)
    (work / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
