import torch
import torch.nn as nn
from torch.utils import cpp_extension

source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B) {
    int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    cublasSetStream(handle, at::cuda::getCurrentCUDAStream());
    const float alpha = 1.0f, beta = 0.0f;
    // row-major C = A @ B computed as column-major C^T = B^T @ A^T
    cublasStatus_t status = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha,
                                        B.data_ptr<float>(), N, A.data_ptr<float>(), K, &beta,
                                        C.data_ptr<float>(), N);
    TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed");
    return C;
}
"""

matmul = cpp_extension.load_inline(
    name="matmul_cublas",
    cpp_sources="torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B);",
    cuda_sources=source,
    functions={"matmul_cuda": "C = A @ B with cuBLAS"},
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return matmul.matmul_cuda(A.contiguous(), B.contiguous())
