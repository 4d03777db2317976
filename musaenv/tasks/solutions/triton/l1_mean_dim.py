"""Reference Triton solution for l1_mean_dim: a strided mean over any one dimension (removed from the shape).

The input is viewed as (outer, R, inner) around the reduced dimension. Each program owns one outer index
and BLOCK_I consecutive inner indices (coalesced loads) and walks R in BLOCK_R-row tiles.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim_kernel(x_ptr, out_ptr, R, inner, scale, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    r = tl.arange(0, BLOCK_R)
    i_mask = i < inner
    base = x_ptr + o * R * inner
    acc = tl.zeros([BLOCK_I], tl.float32)
    for start in range(0, R, BLOCK_R):
        rows = start + r
        mask = (rows < R)[:, None] & i_mask[None, :]
        tile = tl.load(base + rows.to(tl.int64)[:, None] * inner + i[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + o * inner + i, acc * scale, mask=i_mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(mean_dim_kernel, triton.JITFunction)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        d = self.dim % x.dim()
        outer = math.prod(x.shape[:d])
        R = x.shape[d]
        inner = math.prod(x.shape[d + 1 :])
        out_shape = list(x.shape)
        del out_shape[d]
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        # GPU: 8 x 128 tiles; CPU interpreter: big tiles, few program instances.
        block_r, block_i = (8, 128) if _ON_GPU else (64, 512)
        block_i = min(block_i, triton.next_power_of_2(max(inner, 1)))
        grid = (outer, triton.cdiv(inner, block_i))
        mean_dim_kernel[grid](x, out, R, inner, 1.0 / R, BLOCK_R=block_r, BLOCK_I=block_i)
        return out
