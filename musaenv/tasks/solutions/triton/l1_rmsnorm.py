"""Reference Triton solution for l1_rmsnorm: per row, the sum of squares, then x / sqrt(mean + eps).

Any hidden size works (rows are walked in BLOCK-wide chunks). Each program owns BLOCK_ROWS rows (1 on a GPU,
many in the interpreter).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, out_ptr, n_rows, n_cols, eps, BLOCK_ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    row_off = rows.to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK_ROWS, BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        col_mask = (c < n_cols)[None, :]
        mask = row_mask[:, None] & col_mask
        x = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=0.0)
        acc += x * x
    rms = tl.sqrt(tl.sum(acc, axis=1) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        col_mask = (c < n_cols)[None, :]
        mask = row_mask[:, None] & col_mask
        x = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=0.0)
        tl.store(out_ptr + row_off + c[None, :], x / rms[:, None], mask=mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(rmsnorm_kernel, triton.JITFunction)


def _blocks(x: torch.Tensor, rows: int, cols: int) -> tuple[int, int]:
    """(rows per program, columns per chunk). GPU: one row per program, chunks of at most 4096 columns.
    CPU interpreter: whole rows and many rows per program, since it pays per program instance."""
    if _ON_GPU:
        return 1, min(triton.next_power_of_2(cols), 4096)
    block = min(triton.next_power_of_2(cols), 1 << 16)
    return max(1, min(triton.next_power_of_2(rows), (1 << 17) // block)), block


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = float(eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        out = torch.empty_like(x)
        block_rows, block = _blocks(x, rows, cols)
        grid = (triton.cdiv(rows, block_rows),)
        rmsnorm_kernel[grid](x, out, rows, cols, self.eps, BLOCK_ROWS=block_rows, BLOCK=block)
        return out
