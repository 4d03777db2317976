"""The CPU backend: C++ kernels built with ``load_inline(cpp_sources=...)``, run on the host's cores."""

from __future__ import annotations

from musaenv.backends.base import Backend, BackendInfo


def probe() -> BackendInfo:
    return BackendInfo("cpu", "cpu", "cpu")


BACKEND = Backend(
    name="cpu",
    device="cpu",
    tier="cpu",
    probe=probe,
    prompt_note="Write the kernels in C++ for the CPU and build them with load_inline(..., cpp_sources=..., "
    "functions=[...]). Operate on raw pointers (tensor.data_ptr<float>()) with plain loops.",
    mismatch="the cpu backend cannot run Triton kernels or CUDA/MUSA sources",
    device_code=False,
)
