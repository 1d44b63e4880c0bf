"""Tiny Triton kernels with swizzle sites, used by the tests to run emitted formulas in the interpreter.

Each program writes the tile it was remapped to, so the output is the permutation the kernel ran.
"""

import triton
import triton.language as tl


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


@triton.jit
def no_site(out_ptr, n):
    # the launch index is never given a name, so there is nothing to replace
    tl.store(out_ptr + tl.program_id(0), n)
