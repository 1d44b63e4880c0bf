"""swizzlelab's own --inputs function for torchao_intmm_triton.py's launchers `int_matmul_kernel(a, b, c, config)`
and `int_scaled_matmul_kernel(a, b, scales1, c, config)`: seeded int8 operands, the int32 (or scaled float32)
output, row scales, and the `triton.Config` torchao's own autotuner (torchao.kernel.autotuner, not installed here)
would hand them: one of the file's configs (32x32x32 blocks, or the block sizes, stages and warps given as
--size block_m=128 ... num_warps=8).

Written for swizzlelab's tests (not published code).
"""

import torch
import triton


def intmm_inputs(M, N, K, seed, device, block_m=32, block_n=32, block_k=32, num_stages=1, num_warps=4):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (M, K), generator=generator, dtype=torch.int8)
    b = torch.randint(-128, 128, (K, N), generator=generator, dtype=torch.int8)
    scales1 = torch.rand((M, 1), generator=generator, dtype=torch.float32) + 0.5
    config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8},
                           num_stages=num_stages, num_warps=num_warps)
    return {"a": a.to(device), "b": b.to(device), "scales1": scales1.to(device),
            "c": torch.empty((M, N), dtype=torch.int32, device=device), "config": config}
