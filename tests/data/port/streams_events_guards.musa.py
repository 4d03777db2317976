"""A candidate that launches on torch's current stream, times itself with events and guards the device."""

import torch
import torch_musa
import torch.nn as nn
from torch_musa.utils.musa_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include "torch_musa/csrc/aten/musa/MUSAContext.h"
#include "torch_musa/csrc/core/MUSAGuard.h"
#include <musa_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float s, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}

torch::Tensor scale_cuda(torch::Tensor x, double s) {
    TORCH_CHECK(x.device().type() == torch::kPrivateUse1, "x must live on the GPU");
    TORCH_CHECK(x.device().type() == c10::DeviceType::PrivateUse1);
    const c10::musa::OptionalMUSAGuard device_guard(device_of(x));
    musaStream_t stream = c10::musa::getCurrentMUSAStream();
    auto y = torch::empty_like(x);
    int64_t n = x.numel();

    musaEvent_t start, stop;
    musaEventCreate(&start);
    musaEventCreate(&stop);
    musaEventRecord(start, stream);
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
    C10_MUSA_KERNEL_LAUNCH_CHECK();
    musaEventRecord(stop, stream);
    musaEventSynchronize(stop);
    float ms = 0.0f;
    musaEventElapsedTime(&ms, start, stop);
    musaEventDestroy(start);
    musaEventDestroy(stop);
    musaStreamSynchronize(stream);
    return y;
}
"""

cpp_source = "torch::Tensor scale_cuda(torch::Tensor x, double s);"

scale = load_inline(
    name="scale",
    cpp_sources=[cpp_source],
    musa_sources=[cuda_source],
    functions=["scale_cuda"],
    with_musa=True,
)


class ModelNew(nn.Module):
    def forward(self, x):
        start = torch.musa.Event(enable_timing=True)
        end = torch.musa.Event(enable_timing=True)
        start.record()
        y = scale.scale_cuda(x, 2.0)
        end.record()
        torch.musa.synchronize()
        return y
