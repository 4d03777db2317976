"""Reference Triton solution for l1_mul: elementwise a * b, one masked block per program."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mul_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, a * b, mask=mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(mul_kernel, triton.JITFunction)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        # Large blocks on CPU: the interpreter pays per program instance; a GPU wants many small ones.
        block = 1024 if _ON_GPU else 65536
        mul_kernel[(triton.cdiv(n, block),)](a, b, out, n, BLOCK=block)
        return out
