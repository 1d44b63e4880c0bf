"""Probe kernels: each program stores the tile it was remapped to, so the output is the order a GPU really ran.

Splice an order into them with swizzle.apply_swizzle and compare the output with the formula's permutation.
"""

from __future__ import annotations

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def write_tile_2d(out_ptr, num_pid_m, num_pid_n):
    # swizzle: begin
    pid = tl.program_id(0)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    # swizzle: end
    tl.store(out_ptr + tl.program_id(0), pid_m * num_pid_n + pid_n)


@triton.jit
def write_tile_1d(out_ptr, n):
    pid = tl.program_id(0)
    tl.store(out_ptr + tl.program_id(0), pid)
