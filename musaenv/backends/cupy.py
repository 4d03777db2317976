"""The CuPy backend: CUDA kernels as source strings compiled by NVRTC through CuPy; without a GPU compiled, not run."""

from __future__ import annotations

import importlib.util

from musaenv.backends.base import Backend, BackendInfo, cuda_device_present
from musaenv.errors import BackendUnavailableError


def probe() -> BackendInfo:
    """CuPy candidates: kernels compiled by NVRTC through CuPy; without a GPU they are compiled, not run."""
    if importlib.util.find_spec("cupy") is None:
        raise BackendUnavailableError(
            "backend 'cupy' needs CuPy and NVRTC: pip install 'musaenv[cupy]' (cupy-cuda13x, nvidia-cuda-nvrtc)"
        )
    if cuda_device_present():
        return BackendInfo("cupy", "cuda", "gpu")
    try:  # compile-only needs NVRTC itself, which CuPy loads lazily: a missing libnvrtc shows here, not per candidate
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:
        raise BackendUnavailableError(
            f"backend 'cupy' without a GPU compiles kernels with NVRTC, which cannot be loaded here ({exc}); "
            "pip install 'musaenv[cupy]' (nvidia-cuda-nvrtc)"
        ) from exc
    return BackendInfo(
        "cupy", "cpu", "gpu", compile_only=True,
        reason="no CUDA GPU here: CuPy kernels are compiled with NVRTC but not run",
    )  # fmt: skip


def _cupy_kernel(call: str) -> bool:
    return "get_function" in call or call.startswith("cupy.")


BACKEND = Backend(
    name="cupy",
    device="cuda",
    tier="gpu",
    probe=probe,
    prompt_note="""Write CUDA kernels as source strings compiled by CuPy (NVRTC): build them with
cupy.RawModule(code=SRC) (take each kernel with module.get_function("name")) or cupy.RawKernel(SRC, "name"),
and launch them from forward as kernel(grid, block, args) on torch CUDA tensors: pass the tensors themselves
(contiguous; .detach() parameters) or cupy.from_dlpack(t) views, plus the sizes. Python ints arrive as long long
and floats as double (or wrap them: cupy.int32(n), cupy.float32(v)). Declare kernels extern "C" (or list
templates in name_expressions). Only RawModule, RawKernel, get_function, from_dlpack, asarray and the scalar types
of CuPy may be used: no CuPy array math, cupy.linalg/fft/cuBLAS, streams, runtime or driver calls. Kernels run on
torch's current stream. Allowed options=: -std=c++17, --use_fast_math, -D/-U macros, -lineinfo,
-maxrregcount=N. Example:
```python
import cupy
import torch
import torch.nn as nn

SRC = r\"\"\"
extern "C" __global__ void scale(const float* x, float* y, float a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
\"\"\"
_module = cupy.RawModule(code=SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = _module.get_function("scale")

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        self.scale(((n + 255) // 256,), (256,), (x, y, cupy.float32(2.0), n))
        return y
```""",
    ray_resources={"num_gpus": 1},
    loader_call="cupy.RawModule/RawKernel",
    worker_hook="musaenv.worker.cupy_hook:worker_hook",
    kernel_marker="__global__",
    kernel_call=_cupy_kernel,
    mismatch="the cupy backend expects CuPy RawModule/RawKernel kernels, but forward calls none",
    cupy_api=True,
)
