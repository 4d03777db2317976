"""Reference Triton solution for l1_matmul: a tiled C = A @ B with fp32 (IEEE) dot products.

``input_precision="ieee"`` keeps the products in full fp32: Triton's default on Ampere and newer GPUs is TF32,
which misses the fp32 tolerance of 1e-4 (KernelBench's protocol; see docs/REFERENCES). Masks on M, N and K
make every shape work, including sizes that are not multiples of a tile.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a_mask = (rm < M)[:, None] & (kk < K)[None, :]
        b_mask = (kk < K)[:, None] & (rn < N)[None, :]
        a = tl.load(a_ptr + rm.to(tl.int64)[:, None] * stride_am + kk[None, :] * stride_ak, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + kk.to(tl.int64)[:, None] * stride_bk + rn[None, :] * stride_bn, mask=b_mask, other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    c_mask = (rm < M)[:, None] & (rn < N)[None, :]
    tl.store(c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=c_mask)


# @triton.jit gives a JITFunction on a GPU and an InterpretedFunction under TRITON_INTERPRET=1, where the grid
# is a Python loop and large blocks pay (x.is_cuda cannot tell: the interpreter presents inputs as CUDA tensors).
_ON_GPU = isinstance(matmul_kernel, triton.JITFunction)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        K2, N = B.shape
        assert K == K2, "inner dimensions differ"
        C = torch.empty((M, N), dtype=A.dtype, device=A.device)
        # GPU: 64 x 64 x 32 tiles; CPU interpreter: larger tiles, fewer program instances.
        bm, bn, bk = (64, 64, 32) if _ON_GPU else (128, 128, 64)
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        matmul_kernel[grid](
            A,
            B,
            C,
            M,
            N,
            K,
            A.stride(0),
            A.stride(1),
            B.stride(0),
            B.stride(1),
            C.stride(0),
            C.stride(1),
            BLOCK_M=bm,
            BLOCK_N=bn,
            BLOCK_K=bk,
        )
        return C
