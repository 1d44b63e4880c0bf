"""swizzlelab's own launcher for rocm_xcd_matmul_kernel.py, which ROCm publishes without one (its tune_gemm.py
generates the launch): the kernel launched with tune_gemm.py's grid and constexprs (grid = (tiles, SPLIT_K),
GRID_MN = the tile count, NUM_XCDS = 8 without split-K), without the AMD-only compile options.

Written for swizzlelab's tests (not published code); the kernel file stays unedited and is imported by its
module name, as a launcher beside it would.
"""

import torch
import triton

from rocm_xcd_matmul_kernel import matmul_kernel


def matmul(a, b, block_m=32, block_n=32, block_k=32, group_m=4, split_k=1):
    M, K = a.shape
    K, N = b.shape
    c = torch.zeros((M, N), device=a.device, dtype=a.dtype)
    grid = triton.cdiv(M, block_m) * triton.cdiv(N, block_n), split_k
    matmul_kernel[grid](a, b, c, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), stride_bias=0, BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k,
                        GROUP_SIZE_M=group_m, SPLIT_K=split_k, BIAS=False, EVEN_K=K % block_k == 0, GRID_MN=grid[0],
                        NUM_XCDS=1 if split_k > 1 else 8)
    return c
