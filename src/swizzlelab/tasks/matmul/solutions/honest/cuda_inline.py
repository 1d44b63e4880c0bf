# honest: CUDA C++ built with torch.utils.cpp_extension.load_inline (needs nvcc) | gpu: honest_time | cpu: skip
import torch
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_fp16.h>
#include <torch/extension.h>
#define TILE 32
__global__ void mm_kernel(const __half* a, const __half* b, __half* c, int M, int N, int K) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        as[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? __half2float(a[(long)row * K + k0 + threadIdx.x]) : 0.f;
        bs[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < K) ? __half2float(b[(long)(k0 + threadIdx.y) * N + col]) : 0.f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) c[(long)row * N + col] = __float2half(acc);
}
torch::Tensor mm(torch::Tensor a, torch::Tensor b, torch::Tensor c) {
    int M = a.size(0), K = a.size(1), N = b.size(1);
    dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    mm_kernel<<<grid, block>>>((const __half*)a.data_ptr(), (const __half*)b.data_ptr(), (__half*)c.data_ptr(), M, N, K);
    return c;
}
"""
CPP_SRC = "torch::Tensor mm(torch::Tensor a, torch::Tensor b, torch::Tensor c);"
_ext = load_inline("swizzlelab_mm_inline", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["mm"],
                   extra_cuda_cflags=["-O3"], verbose=False)


def custom_kernel(data):
    return _ext.mm(data["a"], data["b"], data["out"])
