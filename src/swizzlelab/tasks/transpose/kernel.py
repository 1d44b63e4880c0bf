"""Triton kernel of `transpose`: each program of a 2-D launch copies one BLOCK_SIZE_M x BLOCK_SIZE_N tile of x to out.

The tile order is set at the kernel's swizzle site (launch order: down x's tile columns); custom_kernel splices others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.runtime import device, ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from swizzlelab.swizzle import apply_swizzle  # noqa: E402


@dataclass(frozen=True)
class TransposeConfig:
    """Launch configuration: tile shape in elements of x, and warps per program."""

    block_m: int
    block_n: int
    num_warps: int


# H100: a 64 x 64 tile is one full 128-byte line per row in fp16 (two in fp32) on both the read and the
# write side; 4 warps give each thread 16-32 elements, enough loads in flight for a copy kernel.
GPU_CONFIG = TransposeConfig(block_m=64, block_n=64, num_warps=4)
# The interpreter runs each program in numpy: tiny tiles keep tests fast and make edge tiles common.
CPU_CONFIG = TransposeConfig(block_m=16, block_n=16, num_warps=1)

# Programs resident per SM for GPU_CONFIG on an H100, as ncu measured it (the smallest launch__occupancy_limit_*;
# git 43bd3ac:benchmarks/eval_h100/transpose-profile.json): the simulator's occupancy for NVIDIA targets.
H100_OCCUPANCY = 12


def default_config() -> TransposeConfig:
    """The configuration for the backend this process runs kernels on."""
    return GPU_CONFIG if device() == "cuda" else CPU_CONFIG


def with_tile(cfg: TransposeConfig, tile_m: int | None = None, tile_n: int | None = None) -> TransposeConfig:
    """`cfg` with BLOCK_SIZE_M = tile_m and BLOCK_SIZE_N = tile_n where a case names them (powers of two, as Triton's
    block sizes are). Tiles narrower than a 128-byte line (tile_n * element bytes < 128 on the read side, tile_m *
    element bytes on the write side) share lines with their neighbours, so the order decides whether a line's
    second part still finds the first in L2: the original MI300X work's 32 x 32 fp16 tiles, or tile_n = 8 (16-byte
    reads that share 32-byte sectors)."""
    for name, value in (("tile_m", tile_m), ("tile_n", tile_n)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1
                                  or value & (value - 1)):
            raise UserError(f"transpose: {name} must be a power of two >= 1 (Triton block sizes), got {value!r}")
    return replace(cfg, block_m=tile_m or cfg.block_m, block_n=tile_n or cfg.block_n)


@triton.jit
def transpose_kernel(
    input_ptr,
    output_ptr,
    M,
    N,
    stride_in_m,
    stride_in_n,
    stride_out_m,
    stride_out_n,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
):
    # A 2-D launch over the tile grid, axis 0 fastest as the hardware dispatches it: the kernel's own order runs the
    # tiles of one tile column of the input (pid_n) one after another. The original MI300X work's kernel had this
    # shape and these names; its formulas read them (../shared/seed_formulas/transpose).
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    # int64 offsets: M * N may exceed 2**31 elements on large cases.
    input_ptrs = input_ptr + offs_m[:, None].to(tl.int64) * stride_in_m + offs_n[None, :] * stride_in_n
    block = tl.load(input_ptrs, mask=mask)
    # out = input.T: out[j, i] lies stride_out_n * j + stride_out_m * i from its start.
    output_ptrs_transposed = output_ptr + offs_n[:, None].to(tl.int64) * stride_out_n + offs_m[None, :] * stride_out_m
    tl.store(output_ptrs_transposed, tl.trans(block), mask=tl.trans(mask))


# CUDA launches at most 65535 programs on grid axis 1 (Triton on HIP the same).
MAX_AXIS1 = 65535


def tile_grid(*, m: int, n: int, config: TransposeConfig | None = None, tile_m: int | None = None,
              tile_n: int | None = None, **_: Any) -> tuple[int, int]:
    """(row tiles, column tiles) of the input: the launch grid too (axis 1 at most 65535 programs)."""
    cfg = with_tile(config or default_config(), tile_m, tile_n)
    grid = (math.ceil(m / cfg.block_m), math.ceil(n / cfg.block_n))
    if grid[1] > MAX_AXIS1:
        raise UserError(
            f"transpose: n={n} with tiles {cfg.block_n} wide is {grid[1]} tile columns, but a launch holds at most "
            f"{MAX_AXIS1} programs on axis 1: use a wider tile (tile_n) or a smaller n"
        )
    return grid


def swizzle_args(
    *, m: int, n: int, config: TransposeConfig | None = None, tile_m: int | None = None, tile_n: int | None = None,
    **_: Any,
) -> tuple[dict[str, int], dict[str, int]]:
    """Runtime scalars and constexprs a swizzle formula may name at this kernel's site (contiguous tensors)."""
    cfg = with_tile(config or default_config(), tile_m, tile_n)
    args = {"M": m, "N": n, "stride_in_m": n, "stride_in_n": 1, "stride_out_m": 1, "stride_out_n": m}
    return args, {"BLOCK_SIZE_M": cfg.block_m, "BLOCK_SIZE_N": cfg.block_n}


def kernel_for(order: Any = None) -> Any:
    """The jit kernel with `order` (a Formula) at its swizzle site; None keeps the launch order."""
    return apply_swizzle(transpose_kernel, order)


def custom_kernel(data: dict[str, Any], order: Any = None, config: TransposeConfig | None = None) -> torch.Tensor:
    """Write data["x"].T into data["out"] and return it (a case's tile_m / tile_n travel in data and set the tile)."""
    cfg = with_tile(config or default_config(), data.get("tile_m"), data.get("tile_n"))
    x, out = data["x"], data["out"]
    m, n = x.shape
    grid = tile_grid(m=m, n=n, config=cfg)
    kernel_for(order)[grid](
        x, out, m, n, x.stride(0), x.stride(1), out.stride(1), out.stride(0),
        BLOCK_SIZE_M=cfg.block_m, BLOCK_SIZE_N=cfg.block_n, num_warps=cfg.num_warps,
    )
    return out
