"""CuPy-format candidates (backend ``cupy``): honest ones, a broken one and hostile ones (HACKS.md in CuPy).

Shared by the static tests (run anywhere), the CPU compile-only tests and the GPU tests.
"""

from __future__ import annotations

_HEAD = """import cupy
import torch
import torch.nn as nn
"""

RELU_SRC = r'''
SRC = r"""
extern "C" __global__ void relu(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
"""
_module = cupy.RawModule(code=SRC, options=("--use_fast_math",))
'''

_RELU_FORWARD = """

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = _module.get_function("relu")

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        self.relu(((n + 255) // 256,), (256,), (x, y, n))
        return y
"""

#: A correct ReLU for ``l1_relu``: a RawModule, get_function, a launch on torch tensors.
RELU_CUPY = _HEAD + RELU_SRC + _RELU_FORWARD

#: The same with a kernel that does not compile: ``compile_error`` with NVRTC's log.
BROKEN_RELU_CUPY = RELU_CUPY.replace("y[i] = x[i] > 0.f", "y[i] = xx[i] > 0.f")

#: A correct row softmax for ``l1_softmax``: a RawKernel, one block per row, shared-memory reductions, cupy views.
SOFTMAX_CUPY = (
    _HEAD
    + r'''
SRC = r"""
extern "C" __global__ void softmax_rows(const float* x, float* y, int cols) {
    extern __shared__ float red[];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float m = -3.402823466e38f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, row[j]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += __expf(row[j] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.f / red[0];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[j] = __expf(row[j] - m) * inv;
}
"""
_softmax = cupy.RawKernel(SRC, "softmax_rows")
THREADS = 256


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        _softmax((rows,), (THREADS,), (cupy.from_dlpack(x), cupy.from_dlpack(y), cupy.int32(cols)),
                 shared_mem=THREADS * 4)
        return y
'''
)

#: HACKS S5 in CuPy: a token launch, and the work done by cuBLAS through cupy.matmul (``l1_matmul``).
MATMUL_FALLTHROUGH_CUPY = (
    _HEAD
    + RELU_SRC
    + """

class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        _module.get_function("relu")((1,), (1,), (out, out, 0))
        out.copy_(torch.from_dlpack(cupy.matmul(cupy.from_dlpack(a), cupy.from_dlpack(b))))
        return out
"""
)

#: HACKS S11 in CuPy: the output cached by input address; the repeat of trial 1 then runs no kernel.
CACHED_RELU_CUPY = (
    _HEAD
    + RELU_SRC
    + """

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = _module.get_function("relu")
        self.seen = {}

    def forward(self, x):
        key = (x.data_ptr(), x.numel())
        if key in self.seen:
            return self.seen[key]
        y = torch.empty_like(x)
        n = x.numel()
        self.relu(((n + 255) // 256,), (256,), (x.contiguous(), y, n))
        self.seen[key] = y
        return y
"""
)

#: HACKS S1 in CuPy: the kernel is built but never launched; torch does the work.
NO_LAUNCH_CUPY = (
    _HEAD
    + RELU_SRC
    + """

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = _module.get_function("relu")

    def forward(self, x):
        return torch.relu(x)
"""
)
