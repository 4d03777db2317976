"""Reference Triton solution for l1_layernorm: per row, the mean, then the variance, then the write.

Any hidden size works (rows are walked in BLOCK-wide chunks). Each program owns BLOCK_ROWS rows (1 on a GPU,
many in the interpreter).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_rows, n_cols, eps, BLOCK_ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    row_off = rows.to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK)
    # Two-pass statistics (mean, then squared deviations) avoid the cancellation of E[v^2] - E[v]^2.
    acc = tl.zeros([BLOCK_ROWS, BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        col_mask = (c < n_cols)[None, :]
        mask = row_mask[:, None] & col_mask
        v = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=0.0)
        acc += v
    mean = tl.sum(acc, axis=1) / n_cols
    acc = tl.zeros([BLOCK_ROWS, BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        col_mask = (c < n_cols)[None, :]
        mask = row_mask[:, None] & col_mask
        v = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=0.0)
        d = tl.where(mask, v - mean[:, None], 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        col_mask = (c < n_cols)[None, :]
        mask = row_mask[:, None] & col_mask
        v = tl.load(x_ptr + row_off + c[None, :], mask=mask, other=0.0)
        w = tl.load(w_ptr + c[None, :], mask=col_mask, other=0.0)
        b = tl.load(b_ptr + c[None, :], mask=col_mask, other=0.0)
        y = (v - mean[:, None]) * rstd[:, None] * w + b
        tl.store(out_ptr + row_off + c[None, :], y, mask=mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(layernorm_kernel, triton.JITFunction)


def _blocks(x: torch.Tensor, rows: int, cols: int) -> tuple[int, int]:
    """(rows per program, columns per chunk). GPU: one row per program, chunks of at most 4096 columns.
    CPU interpreter: whole rows and many rows per program, since it pays per program instance."""
    if _ON_GPU:
        return 1, min(triton.next_power_of_2(cols), 4096)
    block = min(triton.next_power_of_2(cols), 1 << 16)
    return max(1, min(triton.next_power_of_2(rows), (1 << 17) // block)), block


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        # Same module as the reference so that seeded construction gives the same parameters.
        self.ln = nn.LayerNorm(hidden_size)
        with torch.no_grad():  # the reference's seeded scale and shift, drawn in the same order
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        out = torch.empty_like(x)
        block_rows, block = _blocks(x, rows, cols)
        grid = (triton.cdiv(rows, block_rows),)
        layernorm_kernel[grid](
            x,
            self.ln.weight.contiguous(),
            self.ln.bias.contiguous(),
            out,
            rows,
            cols,
            self.ln.eps,
            BLOCK_ROWS=block_rows,
            BLOCK=block,
        )
        return out
