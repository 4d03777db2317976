"""The CUDA view of CPU tensors (Triton's interpreter judged as on a GPU) and the needs-a-GPU classifier."""

from __future__ import annotations

import pytest
import torch

from musaenv.backends.cuda_view import CudaView
from musaenv.worker.triton_hook import needs_gpu_reason

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the view is for machines without a GPU")


def test_inside_the_view_cpu_tensors_present_as_cuda_and_cuda_placements_stay_on_the_cpu():
    x = torch.arange(4.0)
    p = torch.nn.Parameter(torch.ones(2))
    with CudaView().active():
        assert x.is_cuda and not x.is_cpu and x.device == torch.device("cuda", 0) and x.get_device() == 0
        assert p.is_cuda and p.device.type == "cuda"
        assert x.cuda() is x and x.to("cuda:0") is x and x.to(x.device) is x
        y = torch.empty(3, device="cuda")
        z = torch.zeros(2, device=x.device)
        w = x.new_zeros(2, device=0)
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        torch.cuda.synchronize()
    assert {t.device.type for t in (y, z, w)} == {"cpu"}  # real placement, seen from outside
    assert not x.is_cuda and x.device.type == "cpu" and not torch.cuda.is_available()


def test_view_is_reentrant_and_restores_torch_cuda_identities():
    before = torch.cuda.synchronize, torch.cuda.is_available
    view = CudaView()
    with view.active():
        with view.active():
            assert torch.ones(1).is_cuda
        assert torch.ones(1).is_cuda  # still inside the outer entry
    assert (torch.cuda.synchronize, torch.cuda.is_available) == before  # watched as timers by the runtime guard


def test_needs_gpu_is_recognised_by_the_raising_code_not_by_the_message():
    try:
        torch.cuda.get_device_properties(0)
    except Exception as e:
        reason = needs_gpu_reason(e)
    assert reason is not None and "get_device_properties" in reason
    forged = AssertionError("Torch not compiled with CUDA enabled")  # the same text, raised by candidate code
    try:
        raise RuntimeError("wrapped") from forged
    except RuntimeError as e:
        assert needs_gpu_reason(e) is None
