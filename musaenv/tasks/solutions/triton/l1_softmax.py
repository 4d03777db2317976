"""Reference Triton solution for l1_softmax: online max/sum pass, then a write pass, per row.

Any row length works (rows are walked in BLOCK-wide chunks); the max is subtracted before exp, which the
task's inputs overflow otherwise. Each program owns BLOCK_ROWS rows (1 on a GPU, many in the interpreter).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    row_off = rows.to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK)
    # Pass 1: per-lane running max and rescaled sum (online softmax), merged across lanes afterwards.
    # m_safe replaces a -inf max by 0 so that lanes that saw only padding never compute inf - inf.
    m = tl.full([BLOCK_ROWS, BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_ROWS, BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        mask = row_mask[:, None] & (c < n_cols)[None, :]
        x = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=float("-inf"))
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    row_max = tl.max(m, axis=1)
    row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    row_sum = tl.sum(s * tl.exp(m - row_max[:, None]), axis=1)
    row_sum = tl.where(row_sum > 0.0, row_sum, 1.0)  # rows past the end only
    # Pass 2: normalised values.
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        mask = row_mask[:, None] & (c < n_cols)[None, :]
        x = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=0.0)
        y = tl.exp(x - row_max[:, None]) / row_sum[:, None]
        tl.store(out_ptr + row_off + c[None, :], y, mask=mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(softmax_kernel, triton.JITFunction)


def _blocks(x: torch.Tensor, rows: int, cols: int) -> tuple[int, int]:
    """(rows per program, columns per chunk). GPU: one row per program, chunks of at most 4096 columns.
    CPU interpreter: whole rows and many rows per program, since it pays per program instance."""
    if _ON_GPU:
        return 1, min(triton.next_power_of_2(cols), 4096)
    block = min(triton.next_power_of_2(cols), 1 << 16)
    return max(1, min(triton.next_power_of_2(rows), (1 << 17) // block)), block


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        block_rows, block = _blocks(x, rows, cols)
        softmax_kernel[(triton.cdiv(rows, block_rows),)](x, out, rows, cols, BLOCK_ROWS=block_rows, BLOCK=block)
        return out
