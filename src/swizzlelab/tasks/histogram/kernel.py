"""Triton kernel of `histogram`: each program histograms BLOCK_C channels over ROWS_PER_PROG rows.

The tile order is set at the kernel's swizzle site (row-major by default); custom_kernel splices in others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from swizzlelab.runtime import device, ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from swizzlelab.swizzle import apply_swizzle  # noqa: E402

N_BINS = 256


@dataclass(frozen=True)
class HistogramConfig:
    """Launch configuration: rows and channels per program, rows per tl.histogram call, warps."""

    rows_per_prog: int
    block_r: int
    block_c: int
    num_warps: int


# H100: 32 channels = one 32-byte sector of each row line per program, 16 groups per 512-channel row.
# 8192 rows per program keeps the final atomics (32 x 256 per program) near 3% of the elements, and 2048-row
# histogram calls amortise tl.histogram's shared-memory reduction; 128 x 16 = 2048 programs fill 132 SMs.
GPU_CONFIG = HistogramConfig(rows_per_prog=8192, block_r=2048, block_c=32, num_warps=8)
# The interpreter runs each program in numpy: small tiles keep tests fast and make edge tiles common.
CPU_CONFIG = HistogramConfig(rows_per_prog=32, block_r=16, block_c=4, num_warps=1)

# Programs resident per SM for GPU_CONFIG on an H100, as ncu measured it (the smallest launch__occupancy_limit_*;
# git 43bd3ac:benchmarks/eval_h100/histogram-profile.json): the simulator's occupancy for NVIDIA targets.
H100_OCCUPANCY = 2


def default_config() -> HistogramConfig:
    """The configuration for the backend this process runs kernels on."""
    return GPU_CONFIG if device() == "cuda" else CPU_CONFIG


@triton.jit
def histogram_kernel(
    x_ptr,
    counts_ptr,
    n_rows,
    n_channels,
    ROWS_PER_PROG: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    NUM_BINS: tl.constexpr,
):
    num_pid_m = tl.cdiv(n_rows, ROWS_PER_PROG)  # noqa: F841 - read by swizzle formulas
    num_pid_n = tl.cdiv(n_channels, BLOCK_C)
    # swizzle: begin
    pid = tl.program_id(0)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    # swizzle: end
    chans = pid_n * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_ok = chans < n_channels
    local = tl.arange(0, BLOCK_C)
    bins = tl.arange(0, NUM_BINS)
    acc = tl.zeros((BLOCK_C, NUM_BINS), dtype=tl.int32)
    row_begin = pid_m * ROWS_PER_PROG
    row_end = tl.minimum(row_begin + ROWS_PER_PROG, n_rows)
    for r0 in range(row_begin, row_end, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        row_ok = rows < row_end
        row_ptrs = x_ptr + rows.to(tl.int64) * n_channels + pid_n * BLOCK_C
        # One channel at a time keeps tl.histogram at 256 bins (its cost grows with the bin count); the
        # strided byte loads re-read the chunk's lines, which stay in L1 across the BLOCK_C iterations.
        for c in tl.static_range(BLOCK_C):
            ok = row_ok & (pid_n * BLOCK_C + c < n_channels)
            values = tl.load(row_ptrs + c, mask=ok, other=0).to(tl.int32)
            hist = tl.histogram(values, NUM_BINS, mask=ok)
            acc += tl.where(local[:, None] == c, hist[None, :], 0)
    out_ptrs = counts_ptr + chans[:, None] * NUM_BINS + bins[None, :]
    tl.atomic_add(out_ptrs, acc, mask=chan_ok[:, None], sem="relaxed")


def tile_grid(*, rows: int, channels: int, config: HistogramConfig | None = None, **_: Any) -> tuple[int, int]:
    """(row bands, channel groups)."""
    cfg = config or default_config()
    return (math.ceil(rows / cfg.rows_per_prog), math.ceil(channels / cfg.block_c))


def swizzle_args(
    *, rows: int, channels: int, config: HistogramConfig | None = None, **_: Any
) -> tuple[dict[str, int], dict[str, int]]:
    """Runtime scalars and constexprs a swizzle formula may name at this kernel's site."""
    cfg = config or default_config()
    args = {"n_rows": rows, "n_channels": channels}
    consts = {"ROWS_PER_PROG": cfg.rows_per_prog, "BLOCK_R": cfg.block_r, "BLOCK_C": cfg.block_c, "NUM_BINS": N_BINS}
    return args, consts


def kernel_for(order: Any = None) -> Any:
    """The jit kernel with `order` (a Formula) at its swizzle site; None keeps the row-major site."""
    return apply_swizzle(histogram_kernel, order)


def custom_kernel(data: dict[str, Any], order: Any = None, config: HistogramConfig | None = None) -> torch.Tensor:
    """Histogram data["x"] per channel into data["out"] (zeroed first: programs add with atomics)."""
    cfg = config or default_config()
    x, out = data["x"], data["out"]
    rows, channels = x.shape
    grid = tile_grid(rows=rows, channels=channels, config=cfg)
    out.zero_()
    kernel_for(order)[(grid[0] * grid[1],)](
        x, out, rows, channels,
        ROWS_PER_PROG=cfg.rows_per_prog, BLOCK_R=cfg.block_r, BLOCK_C=cfg.block_c, NUM_BINS=N_BINS,
        num_warps=cfg.num_warps,
    )
    return out
