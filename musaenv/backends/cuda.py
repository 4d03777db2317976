"""The CUDA backend: ``load_inline`` with CUDA sources, built by nvcc; without a GPU compiled but not run."""

from __future__ import annotations

from musaenv import _env
from musaenv.backends.base import Backend, BackendInfo, cuda_device_present
from musaenv.errors import BackendUnavailableError


def probe() -> BackendInfo:
    if cuda_device_present():
        return BackendInfo("cuda", "cuda", "gpu")
    if _env.cuda_home() is not None:
        return BackendInfo(
            "cuda",
            "cpu",
            "gpu",
            compile_only=True,
            reason="no CUDA GPU here: sources are compiled with nvcc but not run",
        )
    raise BackendUnavailableError(
        "backend 'cuda' needs a CUDA GPU, or at least nvcc for compile-only checks; found neither "
        "(set CUDA_HOME to a CUDA toolkit, or use backend='cpu')"
    )


BACKEND = Backend(
    name="cuda",
    device="cuda",
    tier="gpu",
    probe=probe,
    prompt_note="Write CUDA kernels and build them with load_inline(..., cpp_sources=..., cuda_sources=..., "
    "functions=[...]). Launch them on the current stream.",
    auto="a CUDA GPU is visible",
    visible_devices="CUDA_VISIBLE_DEVICES",
    ray_resources={"num_gpus": 1},
    kernel_marker="__global__",
)
