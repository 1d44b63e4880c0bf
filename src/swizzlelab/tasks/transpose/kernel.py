"""Triton kernel of `transpose`: each program copies one BLOCK_M x BLOCK_N tile of x into out = x.T.

The tile order is set at the kernel's swizzle site (row-major by default); custom_kernel splices in others.
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


def with_tile_n(cfg: TransposeConfig, tile_n: int | None) -> TransposeConfig:
    """`cfg` with BLOCK_N = tile_n when a case names one. A narrow tile (tile_n * element bytes < 32) reads part
    of a 32-byte sector per row of x, so tiles next to each other along n share sectors and the order decides
    whether the second one finds them in L2: the case where transpose orders differ as ncu counts hits."""
    if tile_n is None:
        return cfg
    if not isinstance(tile_n, int) or isinstance(tile_n, bool) or tile_n < 1 or tile_n & (tile_n - 1):
        raise UserError(f"transpose: tile_n must be a power of two >= 1 (Triton block sizes), got {tile_n!r}")
    return replace(cfg, block_n=tile_n)


@triton.jit
def transpose_kernel(x_ptr, out_ptr, m, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    num_pid_m = tl.cdiv(m, BLOCK_M)  # noqa: F841 - read by swizzle formulas
    num_pid_n = tl.cdiv(n, BLOCK_N)
    # swizzle: begin
    pid = tl.program_id(0)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    # swizzle: end
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    in_bounds = (offs_m[:, None] < m) & (offs_n[None, :] < n)
    # int64 offsets: m * n may exceed 2**31 elements on large cases.
    tile = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * n + offs_n[None, :], mask=in_bounds)
    out_ptrs = out_ptr + offs_n[:, None].to(tl.int64) * m + offs_m[None, :]
    tl.store(out_ptrs, tl.trans(tile), mask=tl.trans(in_bounds))


def tile_grid(*, m: int, n: int, config: TransposeConfig | None = None, tile_n: int | None = None,
              **_: Any) -> tuple[int, int]:
    """(row tiles, column tiles) of x."""
    cfg = with_tile_n(config or default_config(), tile_n)
    return (math.ceil(m / cfg.block_m), math.ceil(n / cfg.block_n))


def swizzle_args(
    *, m: int, n: int, config: TransposeConfig | None = None, tile_n: int | None = None, **_: Any
) -> tuple[dict[str, int], dict[str, int]]:
    """Runtime scalars and constexprs a swizzle formula may name at this kernel's site."""
    cfg = with_tile_n(config or default_config(), tile_n)
    return {"m": m, "n": n}, {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n}


def kernel_for(order: Any = None) -> Any:
    """The jit kernel with `order` (a Formula) at its swizzle site; None keeps the row-major site."""
    return apply_swizzle(transpose_kernel, order)


def custom_kernel(data: dict[str, Any], order: Any = None, config: TransposeConfig | None = None) -> torch.Tensor:
    """Write data["x"].T into data["out"] and return it (data["tile_n"], when the case names one, narrows the tile)."""
    cfg = with_tile_n(config or default_config(), data.get("tile_n"))
    x, out = data["x"], data["out"]
    m, n = x.shape
    grid = tile_grid(m=m, n=n, config=cfg)
    kernel_for(order)[(grid[0] * grid[1],)](
        x, out, m, n, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps
    )
    return out
