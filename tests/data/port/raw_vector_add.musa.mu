// A stand-alone CUDA program: half and bfloat16 vector add with a warp reduction.
#include <cstdio>
#include <musa_runtime.h>
#include <musa_fp16.h>
#include <musa_bf16.h>

#define CUDA_CHECK(call)                                                                  \
    do {                                                                                  \
        musaError_t err_ = (call);                                                        \
        if (err_ != musaSuccess) {                                                        \
            fprintf(stderr, "CUDA error %s at %s:%d\n", musaGetErrorString(err_), __FILE__, __LINE__); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

__global__ void add_bf16(const __mt_bfloat16* a, const __mt_bfloat16* b, __mt_bfloat16* c, int n) {
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
    __mt_bfloat16 *a, *b, *c;
    CUDA_CHECK(musaMalloc(&a, n * sizeof(__mt_bfloat16)));
    CUDA_CHECK(musaMalloc(&b, n * sizeof(__mt_bfloat16)));
    CUDA_CHECK(musaMalloc(&c, n * sizeof(__mt_bfloat16)));
    CUDA_CHECK(musaMemset(a, 0, n * sizeof(__mt_bfloat16)));
    CUDA_CHECK(musaMemset(b, 0, n * sizeof(__mt_bfloat16)));
    add_bf16<<<(n + 255) / 256, 256>>>(a, b, c, n);
    CUDA_CHECK(musaGetLastError());
    CUDA_CHECK(musaDeviceSynchronize());

    float host[4] = {0};
    CUDA_CHECK(musaMemcpy(host, c, sizeof(host), musaMemcpyDeviceToHost));
    musaStream_t stream;
    CUDA_CHECK(musaStreamCreate(&stream));
    CUDA_CHECK(musaMemcpyAsync(a, host, sizeof(host), musaMemcpyHostToDevice, stream));
    CUDA_CHECK(musaStreamSynchronize(stream));
    CUDA_CHECK(musaStreamDestroy(stream));
    CUDA_CHECK(musaFree(a));
    CUDA_CHECK(musaFree(b));
    CUDA_CHECK(musaFree(c));
    printf("ok %f\n", host[0]);
    return 0;
}
