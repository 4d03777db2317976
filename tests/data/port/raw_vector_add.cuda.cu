// A stand-alone CUDA program: half and bfloat16 vector add with a warp reduction.
#include <cstdio>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define CUDA_CHECK(call)                                                                  \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess) {                                                        \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

__global__ void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

__global__ void sum_half(const __half* x, float* out, int n) {
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += __half2float(x[i]);
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);
    if (threadIdx.x == 0) atomicAdd(out, v);
}

int main() {
    const int n = 1 << 20;
    __nv_bfloat16 *a, *b, *c;
    CUDA_CHECK(cudaMalloc(&a, n * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&b, n * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&c, n * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMemset(a, 0, n * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMemset(b, 0, n * sizeof(__nv_bfloat16)));
    add_bf16<<<(n + 255) / 256, 256>>>(a, b, c, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());

    float host[4] = {0};
    CUDA_CHECK(cudaMemcpy(host, c, sizeof(host), cudaMemcpyDeviceToHost));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaMemcpyAsync(a, host, sizeof(host), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(c));
    printf("ok %f\n", host[0]);
    return 0;
}
