"""The Triton backend: ``@triton.jit`` kernels launched from ``forward``; without a GPU, run by Triton's interpreter."""

from __future__ import annotations

import importlib.util

from musaenv.backends.base import Backend, BackendInfo, cuda_device_present
from musaenv.errors import BackendUnavailableError


def probe() -> BackendInfo:
    if importlib.util.find_spec("triton") is None:
        raise BackendUnavailableError("backend 'triton' needs the triton package: pip install 'musaenv[triton]'")
    if cuda_device_present():
        return BackendInfo("triton", "cuda", "gpu")
    _require_interpreter_triton()
    return BackendInfo("triton", "cpu", "interp", reason="no GPU: Triton kernels run in TRITON_INTERPRET=1 mode")


# Triton's interpreter before 3.2 loses the tl.constexpr of kernel arguments when the kernel's module is not in
# sys.modules (tl.arange(0, BLOCK) fails with "arange's arguments must be of type tl.constexpr"), and candidates
# are loaded that way. Seen with 3.0 and 3.1; 3.2, 3.6 and 3.9 run the shipped solutions.
_MIN_INTERPRETER_TRITON = (3, 2)


def _require_interpreter_triton() -> None:
    from importlib import metadata

    try:
        version = metadata.version("triton")
        found = tuple(int(p) for p in version.split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return  # a source build or an unusual version string: let the interpreter speak for itself
    if found < _MIN_INTERPRETER_TRITON:
        want = ".".join(map(str, _MIN_INTERPRETER_TRITON))
        raise BackendUnavailableError(
            f"backend 'triton' without a GPU runs kernels in Triton's interpreter, which needs triton >= {want} "
            f"here (found {version}: its interpreter loses tl.constexpr arguments of kernels loaded the way "
            f"musaenv loads candidates). Install triton>={want} (a GPU machine uses Triton's compiler instead)."
        )


BACKEND = Backend(
    name="triton",
    device="cuda",
    tier="gpu",
    probe=probe,
    prompt_note="""Write Triton kernels (@triton.jit, optionally @triton.autotune) and launch them from forward as
kernel[grid](...). Every call of forward must launch at least one of your own kernels: a forward that launches
none (a PyTorch fallback path, for example) is refused, whatever the policy. Write for CUDA tensors as usual:
where no GPU is present the kernels run in Triton's interpreter on the CPU, with x.is_cuda, x.device ("cuda:0"),
device="cuda" allocations, .cuda()/.to("cuda"), torch.cuda.is_available/device_count/current_device/synchronize
and triton.runtime.driver.active.get_active_torch_device() working as on a GPU (autotuning keeps the first
config there). Other torch.cuda calls (device properties, streams, events) and bfloat16 arithmetic inside a
kernel cannot run in the interpreter: such an answer is not scored there (needs a GPU).""",
    worker_hook="musaenv.worker.triton_hook:worker_hook",
    kernel_call=lambda k: k.endswith("[grid]"),
    mismatch="the triton backend expects Triton kernels, but forward only calls load_inline extensions",
    cpu_interpreter=True,
    jit_processes=True,
)
