"""Triton kernel of `spmv`: each program computes one row of y = A @ x from the CSR arrays.

The row order is set at the kernel's swizzle site `pid = tl.program_id(0)`; custom_kernel splices in others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swizzlelab.runtime import device, ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from swizzlelab.swizzle import apply_swizzle  # noqa: E402


@dataclass(frozen=True)
class SpmvConfig:
    """Launch configuration: nonzeros per loop step and warps per program."""

    block: int
    num_warps: int


# H100: one warp per row, one nonzero per lane per step; the mean row has 32 nonzeros, so most rows take
# one or two steps and the 32-resident-CTA limit per SM bounds occupancy, not registers.
GPU_CONFIG = SpmvConfig(block=32, num_warps=1)
# The interpreter: a 16-wide step makes rows longer than one step common in the small test matrices.
CPU_CONFIG = SpmvConfig(block=16, num_warps=1)

# Programs resident per SM for GPU_CONFIG on an H100, as ncu measured it (the smallest launch__occupancy_limit_*;
# git 43bd3ac:benchmarks/eval_h100/spmv-profile.json): the simulator's occupancy for NVIDIA targets.
H100_OCCUPANCY = 32


def default_config() -> SpmvConfig:
    """The configuration for the backend this process runs kernels on."""
    return GPU_CONFIG if device() == "cuda" else CPU_CONFIG


@triton.jit
def spmv_kernel(row_ptr, col_idx, values, x_ptr, y_ptr, M, BLOCK: tl.constexpr):
    # M: the rows of A, one program each (the name the original MI300X work's formulas read: `num_blocks = M`).
    pid = tl.program_id(0)
    start = tl.load(row_ptr + pid)
    end = tl.load(row_ptr + pid + 1)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k0 in range(start, end, BLOCK):
        offs = k0 + tl.arange(0, BLOCK)
        ok = offs < end
        cols = tl.load(col_idx + offs, mask=ok, other=0)
        vals = tl.load(values + offs, mask=ok, other=0.0)
        acc += vals * tl.load(x_ptr + cols, mask=ok, other=0.0)
    tl.store(y_ptr + pid, tl.sum(acc, axis=0))


def tile_grid(*, rows: int, config: SpmvConfig | None = None, **_: Any) -> tuple[int]:
    """(rows,): one program per row, whatever the config."""
    return (rows,)


def swizzle_args(*, rows: int, config: SpmvConfig | None = None, **_: Any) -> tuple[dict[str, int], dict[str, int]]:
    """Runtime scalars and constexprs a swizzle formula may name at this kernel's site."""
    cfg = config or default_config()
    return {"M": rows}, {"BLOCK": cfg.block}


def kernel_for(order: Any = None) -> Any:
    """The jit kernel with `order` (a Formula) at its swizzle site; None keeps the launch order."""
    return apply_swizzle(spmv_kernel, order)


def custom_kernel(data: dict[str, Any], order: Any = None, config: SpmvConfig | None = None) -> torch.Tensor:
    """Write A @ x into data["out"] and return it."""
    cfg = config or default_config()
    out = data["out"]
    rows = out.numel()
    kernel_for(order)[(rows,)](
        data["row_ptr"], data["col_idx"], data["values"], data["x"], out, rows,
        BLOCK=cfg.block, num_warps=cfg.num_warps,
    )
    return out
