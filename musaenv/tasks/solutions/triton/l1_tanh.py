"""Reference Triton solution for l1_tanh: tanh from exp(-2|x|), which cannot overflow."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    # tanh(|x|) = (1 - e) / (1 + e) with e = exp(-2|x|) in (0, 1]: no overflow for large |x|.
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    y = tl.where(x < 0, -t, t)
    tl.store(out_ptr + offs, y, mask=mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(tanh_kernel, triton.JITFunction)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        # Large blocks on CPU: the interpreter pays per program instance; a GPU wants many small ones.
        block = 1024 if _ON_GPU else 65536
        tanh_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
        return out
