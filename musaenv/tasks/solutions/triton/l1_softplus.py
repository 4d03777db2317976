"""Reference Triton solution for l1_softplus: softplus in its overflow-free form, linear above 20."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softplus_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    # log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)); torch returns x itself above threshold 20.
    soft = tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))
    y = tl.where(x > 20.0, x, soft)
    tl.store(out_ptr + offs, y, mask=mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(softplus_kernel, triton.JITFunction)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        # Large blocks on CPU: the interpreter pays per program instance; a GPU wants many small ones.
        block = 1024 if _ON_GPU else 65536
        softplus_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
        return out
